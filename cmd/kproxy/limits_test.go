package main

import "testing"

func TestLimitFlags(t *testing.T) {
	derived := limitFlags{}.limits(20000)
	// 20,000 fds: 1,024 kept for the control plane; 60% of the rest for
	// TCP at 2 fds a connection and a pipe (2 fds) per 4 connections, 40%
	// for UDP at 1 fd a flow.
	if derived.MaxConns != 4554 || derived.MaxPipes() != 1138 || derived.MaxFlows != 7590 || derived.ConnsPerServicePort != 2277 || derived.FlowsPerServicePort != 3795 {
		t.Errorf("derived from 20,000 fds: %+v", derived)
	}
	if fds := derived.MaxConns*2 + derived.MaxPipes()*2; fds > (20000-1024)*6/10 {
		t.Errorf("connections and pipes may take %d fds, over TCP's share", fds)
	}
	set := limitFlags{maxConns: 100, maxConnsPerServicePort: 10, maxFlows: -1}.limits(20000)
	if set.MaxConns != 100 || set.MaxPipes() != 25 || set.ConnsPerServicePort != 10 || set.MaxFlows != 0 || set.FlowsPerServicePort != 0 {
		t.Errorf("explicit and unbounded: %+v", set)
	}
	if perSP := (limitFlags{maxConns: 100}).limits(20000); perSP.ConnsPerServicePort != 50 {
		t.Errorf("per service port default: %d, want half of 100", perSP.ConnsPerServicePort)
	}
	if none := (limitFlags{maxConns: -1}).limits(20000); none.MaxConns != 0 || none.MaxPipes() != 0 {
		t.Errorf("no connection bound: %+v, want no pipe bound either", none)
	}
}
