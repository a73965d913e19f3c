package actors

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
)

// recordingRules keeps what the Rules actor programs. A fake is fine here:
// the kernel side is proven with real nftables and iptables in network
// namespaces (portal and cmd/kproxy end-to-end tests); this checks the
// actors' plumbing.
type recordingRules struct {
	mu    sync.Mutex
	rules map[portal.RuleKey]portal.PortalRule
	syncs int
	cond  *sync.Cond
}

func newRecordingRules() *recordingRules {
	r := &recordingRules{rules: map[portal.RuleKey]portal.PortalRule{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *recordingRules) Sync(_ context.Context, rules []portal.PortalRule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs++
	r.rules = map[portal.RuleKey]portal.PortalRule{}
	for _, x := range rules {
		r.rules[x.Key()] = x
	}
	r.cond.Broadcast()
	return nil
}

func (r *recordingRules) Apply(_ context.Context, upserts, removals []portal.PortalRule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range removals {
		delete(r.rules, x.Key())
	}
	for _, x := range upserts {
		r.rules[x.Key()] = x
	}
	r.cond.Broadcast()
	return nil
}

func (r *recordingRules) Present(context.Context) (bool, error) { return true, nil }
func (r *recordingRules) Cleanup(context.Context) error         { return r.Sync(context.Background(), nil) }

func (r *recordingRules) waitFor(t *testing.T, ok func(map[portal.RuleKey]portal.PortalRule) bool) {
	t.Helper()
	timer := time.AfterFunc(10*time.Second, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(10 * time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	for !ok(r.rules) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for portal rules; have %v", r.rules)
		}
		r.cond.Wait()
	}
}

// externalTrafficPolicy Local in a kernel mode: external traffic gets its
// own proxy port, served with the external scope (local endpoints only),
// while cluster-IP traffic uses every endpoint.
func TestKernelModeExternalTrafficPolicyLocal(t *testing.T) {
	rules := newRecordingRules()
	p := Start(Config{PortalMode: portal.ModeNftables, Rules: rules, BindAddress: "127.0.0.1",
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
	rules.waitFor(t, func(m map[portal.RuleKey]portal.PortalRule) bool {
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

	// The local endpoint goes away: external traffic is rejected by the
	// rules, cluster traffic still has an endpoint.
	p.Submit(snapshot(2, spe(sp, eps[1:])))
	rules.waitFor(t, func(m map[portal.RuleKey]portal.PortalRule) bool {
		var clusterOK, externalRejected bool
		for _, r := range m {
			switch r.IP.String() {
			case "198.18.0.10":
				clusterOK = !r.Reject
			case "192.0.2.50":
				externalRejected = r.Reject
			}
		}
		return clusterOK && externalRejected
	})
	// Deleting the service port removes its rules; a clean stop leaves none.
	p.Submit(snapshot(3))
	rules.waitFor(t, func(m map[portal.RuleKey]portal.PortalRule) bool { return len(m) == 0 })
}
