package actors

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
)

// The index follows every commit: after random plans (rules added,
// changed, removed, keys taken over by another service port), it equals
// the index built from the set alone.
func TestKernelRecordIndexFollowsCommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rec := newKernelRecord(rules.Set{})
	for step := range 2000 {
		var upserts, removals []rules.Rule
		for range 1 + rng.IntN(4) {
			r := rules.Rule{
				ServicePort: fmt.Sprintf("ns/s%d:p/TCP", rng.IntN(6)),
				Protocol:    "tcp",
				IP:          netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + rng.IntN(8))}),
				Port:        80,
				ProxyPort:   30000 + rng.IntN(3),
				ClusterIP:   rng.IntN(2) == 0,
			}
			switch rng.IntN(4) {
			case 0:
				r.Drop, r.ProxyPort = true, 0
			case 1:
				r.Reject, r.ProxyPort = true, 0
			}
			if old, ok := rec.Set[r.Key()]; ok && rng.IntN(3) == 0 {
				removals = append(removals, old)
				continue
			}
			if _, ok := rec.Set[r.Key()]; !ok || slices.IndexFunc(upserts, func(u rules.Rule) bool { return u.Key() == r.Key() }) < 0 {
				upserts = append(upserts, r)
			}
		}
		del, add, err := rec.Plan(upserts, removals)
		if err != nil {
			continue // two upserts of one key in a plan: refused, as the kernel would be
		}
		rec.commit(del, add)
		want := newKernelRecord(maps.Clone(rec.Set))
		if !sameIndex(rec.byPort, want.byPort) || !maps.Equal(rec.dropInternal, want.dropInternal) || !maps.Equal(rec.dropExternal, want.dropExternal) {
			t.Fatalf("step %d: index %v, drops %v %v; built from the set: %v, %v %v", step,
				rec.byPort, rec.dropInternal, rec.dropExternal, want.byPort, want.dropInternal, want.dropExternal)
		}
	}
}

func sameIndex(a, b map[string][]rules.Key) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ka := range a {
		kb := b[id]
		if len(ka) != len(kb) {
			return false
		}
		for _, k := range ka {
			if !slices.Contains(kb, k) {
				return false
			}
		}
	}
	return true
}
