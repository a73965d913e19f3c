// Package modeltest renders the node-local model (package messages) so
// tests can state what they expect as short strings.
package modeltest

import (
	"fmt"
	"strings"

	"github.com/kproxy/kproxy/messages"
)

// DescribeEndpoints renders endpoints as "ip:port[flags]" so expectations
// read like a table: only the flags that are true are listed.
func DescribeEndpoints(eps []*messages.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		var flags []string
		for _, f := range []struct {
			name string
			on   bool
		}{
			{"ready", ep.GetReady()}, {"serving", ep.GetServing()}, {"terminating", ep.GetTerminating()},
			{"local", ep.GetLocal()}, {"internal", ep.GetInternal()}, {"external", ep.GetExternal()},
		} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		out = append(out, fmt.Sprintf("%s[%s]", ep.Address(), strings.Join(flags, ",")))
	}
	return out
}

// KeyIDs lists the service ports' IDs in order.
func KeyIDs(ports []*messages.ServicePortEndpoints) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, p.GetServicePort().GetKey().ID())
	}
	return out
}
