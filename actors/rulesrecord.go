package actors

import (
	"slices"

	"github.com/kproxy/kproxy/portal/rules"
)

// kernelRecord is the Rules actor's one record of what the kernel holds
// (rules.Set, by key), indexed by the service port that owns each rule,
// so that a batch costs what it changes, not what is programmed: the rules
// a changed service port leaves behind, and the gauges of service ports
// left without a local endpoint, are looked up, not searched for.
type kernelRecord struct {
	rules.Set
	byPort map[string][]rules.Key
	// The service ports with a drop rule, for cluster IPs and for the
	// external addresses (kubeproxy_sync_proxy_rules_no_local_endpoints_total).
	dropInternal, dropExternal map[string]bool
}

func newKernelRecord(s rules.Set) *kernelRecord {
	k := &kernelRecord{Set: s, byPort: map[string][]rules.Key{}, dropInternal: map[string]bool{}, dropExternal: map[string]bool{}}
	for key, r := range s {
		k.byPort[r.ServicePort] = append(k.byPort[r.ServicePort], key)
	}
	for id := range k.byPort {
		k.reindexDrops(id)
	}
	return k
}

// owned is the service port's rules as programmed.
func (k *kernelRecord) owned(id string) []rules.Rule {
	out := make([]rules.Rule, 0, len(k.byPort[id]))
	for _, key := range k.byPort[id] {
		out = append(out, k.Set[key])
	}
	return out
}

// commit records an applied plan (rules.Set.Commit) and re-indexes the
// service ports it touched.
func (k *kernelRecord) commit(del, add []rules.Rule) {
	touched := map[string]bool{}
	for _, r := range del {
		touched[r.ServicePort] = true
	}
	for _, r := range add {
		touched[r.ServicePort] = true
		if old, ok := k.Set[r.Key()]; ok {
			touched[old.ServicePort] = true // a key taken over
		}
	}
	k.Set.Commit(del, add)
	for _, r := range add {
		k.byPort[r.ServicePort] = append(k.byPort[r.ServicePort], r.Key())
	}
	for id := range touched {
		keys := k.byPort[id][:0] // filtered in place: a service port has a few
		for _, key := range k.byPort[id] {
			if r, ok := k.Set[key]; ok && r.ServicePort == id && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		if len(keys) == 0 {
			delete(k.byPort, id)
		} else {
			k.byPort[id] = keys
		}
		k.reindexDrops(id)
	}
}

func (k *kernelRecord) reindexDrops(id string) {
	delete(k.dropInternal, id)
	delete(k.dropExternal, id)
	for _, key := range k.byPort[id] {
		switch r := k.Set[key]; {
		case r.Drop && r.ClusterIP:
			k.dropInternal[id] = true
		case r.Drop:
			k.dropExternal[id] = true
		}
	}
}
