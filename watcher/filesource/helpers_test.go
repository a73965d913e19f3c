package filesource

import (
	"fmt"
	"strings"

	"github.com/kproxy/kproxy/messages"
)

// keyIDs lists the ports' IDs in order.
func keyIDs(ports []*messages.ServicePortEndpoints) (ids []string) {
	for _, p := range ports {
		ids = append(ids, p.GetServicePort().GetKey().ID())
	}
	return ids
}

// describeEndpoints renders endpoints as "ip:port[flags]", naming only
// the flags that are set, in a fixed order.
func describeEndpoints(eps []*messages.Endpoint) []string {
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		set := map[string]bool{"ready": ep.GetReady(), "serving": ep.GetServing(), "terminating": ep.GetTerminating(),
			"local": ep.GetLocal(), "internal": ep.GetInternal(), "external": ep.GetExternal()}
		var flags []string
		for _, f := range []string{"ready", "serving", "terminating", "local", "internal", "external"} {
			if set[f] {
				flags = append(flags, f)
			}
		}
		out = append(out, fmt.Sprintf("%s[%s]", ep.Address(), strings.Join(flags, ",")))
	}
	return out
}
