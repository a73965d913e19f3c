package actors

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// waitRules waits until ok holds for what fake has programmed. A fake is
// fine here: the kernel side is proven with real nftables and iptables in
// network namespaces (portal/rules/... and test/e2e); this checks
// the actors' plumbing.
func waitRules(t *testing.T, fake *rules.Fake, ok func(rules.Set) bool) {
	t.Helper()
	if err := fake.Wait(10*time.Second, ok); err != nil {
		t.Fatal(err)
	}
}

// externalTrafficPolicy Local in a kernel mode: external traffic gets its
// own proxy port, served with the external scope (local endpoints only),
// while cluster-IP traffic uses every endpoint.
func TestKernelModeExternalTrafficPolicyLocal(t *testing.T) {
	fake := rules.NewFake()
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: fake, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	addrs := tcpBackends(t, 2)
	sp := svcPort("etp", messages.Protocol_TCP, "198.18.0.10", 80)
	sp.ExternalIps = &messages.IPSet{V4: []string{"192.0.2.50"}}
	sp.ExternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	eps := endpoints(addrs...)
	eps[0].Local = true
	eps[1].External = false // on another node: not for external traffic
	p.Submit(snapshot(1, spe(sp, eps)))
	st := w.listening(t, sp.GetKey().ID(), 2, 1)
	if st.GetExternalProxyPort() == 0 || st.GetExternalProxyPort() == st.GetProxyPort() {
		t.Fatalf("want a second proxy port, got %d and %d", st.GetProxyPort(), st.GetExternalProxyPort())
	}
	waitRules(t, fake, func(m rules.Set) bool {
		var cluster, external bool
		for _, r := range m {
			switch r.IP.String() {
			case "198.18.0.10":
				cluster = r.ProxyPort == int(st.GetProxyPort()) && !r.Reject
			case "192.0.2.50":
				external = r.ProxyPort == int(st.GetExternalProxyPort()) && !r.Reject
			}
		}
		return cluster && external
	})
	internal := map[string]bool{}
	external := map[string]bool{}
	for range 20 {
		internal[dialName(t, net.JoinHostPort("127.0.0.1", itoa(st.GetProxyPort())))] = true
		external[dialName(t, net.JoinHostPort("127.0.0.1", itoa(st.GetExternalProxyPort())))] = true
	}
	if len(internal) != 2 || len(external) != 1 || !external["backend-0"] {
		t.Fatalf("cluster traffic reached %v (want both), external traffic reached %v (want the local backend-0)", internal, external)
	}

	// The local endpoint goes away: external traffic is dropped by the
	// rules (the service has endpoints elsewhere, so not rejected, as
	// kube-proxy does), except the node's and pods' own, which
	// short-circuits to the cluster's endpoints; cluster traffic still has
	// an endpoint.
	p.Submit(snapshot(2, spe(sp, eps[1:])))
	waitRules(t, fake, func(m rules.Set) bool {
		var clusterOK, externalDropped bool
		for _, r := range m {
			switch r.IP.String() {
			case "198.18.0.10":
				clusterOK = !r.Reject && !r.Drop
			case "192.0.2.50":
				externalDropped = r.Drop && !r.Reject && r.ShortCircuitPort == int(st.GetProxyPort())
			}
		}
		return clusterOK && externalDropped
	})
	// Deleting the service port removes its rules; a clean stop leaves none.
	p.Submit(snapshot(3))
	waitRules(t, fake, func(m rules.Set) bool { return len(m) == 0 })
}

// v4Only is a node whose kernel rules lack IPv6 (iptables without
// ip6tables): IPv6 rules are left out and reported, the rest programmed.
type v4Only struct{ *rules.Fake }

func (v v4Only) split(rs []rules.Rule) ([]rules.Rule, error) {
	var v4 []rules.Rule
	var err error
	for _, r := range rs {
		if !r.NodePort && r.IP.Is6() {
			err = fmt.Errorf("portal rule %s: %w", r, rules.ErrFamilyUnavailable)
			continue
		}
		v4 = append(v4, r)
	}
	return v4, err
}

// v4Set is the part of s this node's kernel holds.
func (v v4Only) v4Set(s rules.Set) rules.Set {
	out := rules.Set{}
	for k, r := range s {
		if r.NodePort || !r.IP.Is6() {
			out[k] = r
		}
	}
	return out
}

func (v v4Only) Sync(ctx context.Context, want rules.Set) error {
	_, missing := v.split(want.Sorted())
	if err := v.Fake.Sync(ctx, v.v4Set(want)); err != nil {
		return err
	}
	return missing
}

func (v v4Only) Apply(ctx context.Context, cur *rules.Programmed, del, add []rules.Rule) error {
	v4add, missing := v.split(add)
	v4del, _ := v.split(del)
	if err := v.Fake.Apply(ctx, rules.NewProgrammed(v.v4Set(cur.Set)), v4del, v4add); err != nil {
		return err
	}
	return missing
}

// One dual-stack service on a node without IPv6 rules does not hold the
// others back: IPv4 rules are programmed, the transaction counts as done
// (no full re-sync every second), and later changes apply incrementally.
func TestRulesWithoutOneFamilyProgramTheOther(t *testing.T) {
	fake := rules.NewFake()
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: v4Only{fake}, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	addrs := tcpBackends(t, 1)
	dual := svcPort("dual", messages.Protocol_TCP, "198.18.0.60", 80)
	dual.ClusterIps.V6 = []string{"2001:db8:5::60"}
	v4 := svcPort("v4", messages.Protocol_TCP, "198.18.0.61", 80)
	p.Submit(snapshot(1, spe(dual, endpoints(addrs...)), spe(v4, endpoints(addrs...))))
	has := func(ip string) func(rules.Set) bool {
		return func(s rules.Set) bool {
			for _, r := range s {
				if r.IP.String() == ip && !r.Reject {
					return true
				}
			}
			return false
		}
	}
	waitRules(t, fake, func(s rules.Set) bool { return has("198.18.0.60")(s) && has("198.18.0.61")(s) })

	v4b := svcPort("v4b", messages.Protocol_TCP, "198.18.0.62", 80)
	p.Submit(snapshot(2, spe(dual, endpoints(addrs...)), spe(v4, endpoints(addrs...)), spe(v4b, endpoints(addrs...))))
	waitRules(t, fake, has("198.18.0.62"))
	if syncs, applies, _ := fake.Calls(); syncs != 1 || applies < 1 {
		t.Fatalf("%d syncs and %d applies; want the start's one sync, then incremental applies", syncs, applies)
	}
}

// The Rules actor's record is what the kernel holds: every transaction is
// planned against it (the Fake refuses one planned against anything but
// what it holds, which would show as a re-sync), an endpoint change that
// keeps a service port's verdicts costs no transaction, and a clash keeps
// the first service port's rule.
func TestRulesRecordIsTheKernel(t *testing.T) {
	fake := rules.NewFake()
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: fake, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	addrs := tcpBackends(t, 2)
	a := svcPort("a", messages.Protocol_TCP, "198.18.0.70", 80)
	b := svcPort("b", messages.Protocol_TCP, "198.18.0.71", 80)
	c := svcPort("c", messages.Protocol_TCP, "198.18.0.70", 80) // a's address and port
	rule := func(m rules.Set, ip string) (rules.Rule, bool) {
		r, ok := m[rules.Key{Protocol: "tcp", IP: netip.MustParseAddr(ip), Port: 80}]
		return r, ok
	}
	p.Submit(snapshot(1, spe(a, endpoints(addrs[0])), spe(b, nil), spe(c, endpoints(addrs[1]))))
	waitRules(t, fake, func(m rules.Set) bool {
		ra, okA := rule(m, "198.18.0.70")
		rb, okB := rule(m, "198.18.0.71")
		return okA && ra.ServicePort == a.GetKey().ID() && !ra.Reject && okB && rb.Reject
	})
	_, applies, _ := fake.Calls()

	// a's endpoint moves (verdicts unchanged), then b gets one (its
	// verdict flips): one transaction, b's.
	p.Submit(snapshot(2, spe(a, endpoints(addrs[1])), spe(b, nil), spe(c, endpoints(addrs[1]))))
	p.Submit(snapshot(3, spe(a, endpoints(addrs[1])), spe(b, endpoints(addrs[0])), spe(c, endpoints(addrs[1]))))
	waitRules(t, fake, func(m rules.Set) bool { rb, ok := rule(m, "198.18.0.71"); return ok && !rb.Reject })
	if _, n, _ := fake.Calls(); n != applies+1 {
		t.Errorf("%d transactions for an endpoint move and one verdict flip, want 1", n-applies)
	}

	p.Submit(snapshot(4, spe(b, endpoints(addrs[0]))))
	waitRules(t, fake, func(m rules.Set) bool { _, ok := rule(m, "198.18.0.70"); return !ok && len(m) == 1 })
	if syncs, _, _ := fake.Calls(); syncs != 1 {
		t.Errorf("%d full syncs, want only the first: a transaction was planned against a record other than the kernel", syncs)
	}
}
