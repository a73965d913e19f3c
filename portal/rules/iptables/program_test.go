package iptables

import "github.com/kproxy/kproxy/test/rulestest"

// tested is a Rules under test with the record its caller keeps
// (rulestest.Programmed's methods; the backend's below it).
type tested struct {
	*rulestest.Programmed
	backend
}

type backend struct{ *Rules }

func program(r *Rules) *tested { return &tested{rulestest.Program(r), backend{r}} }
