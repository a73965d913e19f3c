package main

import "testing"

func TestLimitFlags(t *testing.T) {
	derived := limitFlags{}.limits(20000)
	// 20,000 fds: 1,024 kept for the control plane; 60% of the rest for
	// TCP at 4 fds a connection, 40% for UDP at 1 fd a flow.
	if derived.MaxConns != 2846 || derived.MaxFlows != 7590 || derived.ConnsPerServicePort != 1423 || derived.FlowsPerServicePort != 3795 {
		t.Errorf("derived from 20,000 fds: %+v", derived)
	}
	set := limitFlags{maxConns: 100, maxConnsPerServicePort: 10, maxFlows: -1}.limits(20000)
	if set.MaxConns != 100 || set.ConnsPerServicePort != 10 || set.MaxFlows != 0 || set.FlowsPerServicePort != 0 {
		t.Errorf("explicit and unbounded: %+v", set)
	}
	if perSP := (limitFlags{maxConns: 100}).limits(20000); perSP.ConnsPerServicePort != 50 {
		t.Errorf("per service port default: %d, want half of 100", perSP.ConnsPerServicePort)
	}
}
