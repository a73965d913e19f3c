package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kproxy/kproxy/portal/rules"
)

// builtOnly is knftables' fake running no transaction: what is left is
// building it, Apply's own cost (the kernel's, or the fake's copy of its
// table, aside).
type builtOnly struct{ *knftables.Fake }

func (builtOnly) Run(context.Context, *knftables.Transaction) error { return nil }

// BenchmarkApplyOneChange is one service port's verdict flipping (serve
// to reject and back) with 10,000 service ports programmed, three rules
// each: what building a batch's transaction costs nftables.Apply
// beside the rules already there.
func BenchmarkApplyOneChange(b *testing.B) {
	ctx := context.Background()
	n := newRules(builtOnly{knftables.NewFake(knftables.InetFamily, Table)}, rules.Options{}, true)
	var all []rules.Rule // three per service port
	for i := range 10000 {
		sp := fmt.Sprintf("ns/s%d:http/TCP", i)
		ip := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		ext := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		pp := 20000 + i
		all = append(all,
			rules.Rule{ServicePort: sp, Protocol: "tcp", IP: ip, Port: 80, ProxyPort: pp, ClusterIP: true},
			rules.Rule{ServicePort: sp, Protocol: "tcp", IP: ext, Port: 80, ProxyPort: pp},
			rules.Rule{ServicePort: sp, Protocol: "tcp", NodePort: true, Port: 30000 + i, ProxyPort: pp})
	}
	want, err := rules.Desired(all)
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Sync(ctx, want); err != nil {
		b.Fatal(err)
	}
	cur := rules.NewProgrammed(want)
	serve := all[len(all)-1]
	reject := serve
	reject.Reject, reject.ProxyPort = true, 0
	b.ResetTimer()
	for i := range b.N {
		next := reject
		if i%2 == 1 {
			next = serve
		}
		del, add, err := cur.Plan([]rules.Rule{next}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Apply(ctx, cur, del, add); err != nil {
			b.Fatal(err)
		}
		cur.Commit(del, add)
	}
}
