package actors

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// flowsRecorder records what the Rules actor asks to clear.
type flowsRecorder chan []rules.Rule

func (f flowsRecorder) ClearStale(rs []rules.Rule) (int, error) {
	f <- rs
	return 0, nil
}

func (f flowsRecorder) next(t *testing.T, what string) []rules.Rule {
	t.Helper()
	select {
	case rs := <-f:
		return rs
	case <-time.After(10 * time.Second):
		t.Fatalf("no conntrack clearing for %s", what)
		return nil
	}
}

// The Rules actor clears UDP conntrack entries when a UDP frontend's rule
// is new, changes (rejects once the endpoints are gone), or goes; TCP
// frontends and unchanged rules cost no conntrack dump. The kernel side is
// proven in network namespaces (test/e2e, testUDPConntrack).
func TestRulesClearStaleUDPConntrack(t *testing.T) {
	flows := make(flowsRecorder, 16)
	p := Start(Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake(), Conntrack: flows, BindAddress: "127.0.0.1",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	t.Cleanup(func() { p.Stop(context.Background()) })
	w := watchState(t, p)
	udp := svcPort("dns", messages.Protocol_UDP, "198.18.0.40", 53)
	tcp := svcPort("web", messages.Protocol_TCP, "198.18.0.41", 80)
	eps := endpoints("127.0.0.1:9053")

	p.Submit(snapshot(1, spe(udp, eps), spe(tcp, endpoints("127.0.0.1:9000"))))
	st := w.listening(t, udp.GetKey().ID(), 1, 1)
	rs := flows.next(t, "a new UDP service")
	if len(rs) != 1 || rs[0].Protocol != "udp" || rs[0].ProxyPort != int(st.GetProxyPort()) || rs[0].Reject {
		t.Fatalf("new UDP service: cleared for %v, want its rule to proxy port %d", rs, st.GetProxyPort())
	}

	// Its endpoints go: the rule rejects now, and no entry may bypass it.
	p.Submit(snapshot(2, spe(udp, nil), spe(tcp, endpoints("127.0.0.1:9001"))))
	if rs := flows.next(t, "a UDP service without endpoints"); len(rs) != 1 || !rs[0].Reject {
		t.Fatalf("UDP service without endpoints: cleared for %v, want its rejecting rule", rs)
	}

	// It goes.
	p.Submit(snapshot(3, spe(tcp, endpoints("127.0.0.1:9001"))))
	if rs := flows.next(t, "a deleted UDP service"); len(rs) != 1 || rs[0].IP.String() != "198.18.0.40" {
		t.Fatalf("deleted UDP service: cleared for %v", rs)
	}
	select {
	case rs := <-flows:
		t.Fatalf("unexpected clearing for %v", rs)
	default:
	}
}
