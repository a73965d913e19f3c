package faults_test

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/actortest"
)

// Listener faults that look like real ones, under load: a listening socket
// shut down under its Portal (the Portal is restarted and opens it again),
// and accepts failing with EMFILE for 2 s (connections wait in the
// backlog). The service recovers by itself; failures are counted, and the
// 50 other service ports lose nothing.
func TestListenerFaultsRecover(t *testing.T) {
	// 51 service ports in nftables mode (fake kernel rules, so clients
	// dial the proxy ports on loopback): the first, with ClientIP
	// affinity, gets the faults; clients hammer it and the 50 others.
	tr := startTree(t, actors.Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake()}, zerolog.ErrorLevel)
	restart := tr.restarts(t)
	addrs := tcpBackends(t, 2)
	var spes []*messages.ServicePortEndpoints
	for i := range 51 {
		sp := svcPort(fmt.Sprintf("k-%d", i), fmt.Sprintf("198.18.3.%d", i+1), 80)
		if i == 0 {
			sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
		}
		spes = append(spes, spe(sp, addrs))
	}
	tr.submit(spes...)
	var id, target string
	var others []string
	for i, s := range spes {
		st := tr.w.listening(t, s.GetServicePort().GetKey().ID())
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(st.GetProxyPort())))
		if i == 0 {
			id, target = st.GetKey().ID(), addr
		} else {
			others = append(others, addr)
		}
	}

	stop := make(chan struct{})
	hCrashed := actortest.StartHammer([]string{target}, 2, stop)
	hOthers := actortest.StartHammer(others, 4, stop)
	for i := 1; i <= 5; i++ {
		before := hCrashed.OK.Load()
		if err := tr.inj.SetListenerFault(id, faults.ListenerFaultBreak, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-restart:
			if got != "portal" {
				t.Fatalf("break %d: %s restarted, want the portal", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("break %d: the Portal was not restarted", i)
		}
		// The next break must find the new socket: the restarted Portal
		// has reported it (the restart event comes before the broken one
		// is replaced, and clients count connections from before).
		tr.w.Wait(t, fmt.Sprintf("the Portal listening again after break %d", i), func(m map[string]*messages.ServicePortState) bool {
			return m[id].GetRestarts() == int32(i) && len(m[id].GetListenAddresses()) == 1
		})
		actortest.WaitOK(t, hCrashed, before+10)
	}
	failedBreak, first := hCrashed.Failed()
	t.Logf("5 broken listeners: %d connections failed on the broken service port (first: %v)", failedBreak, first)

	before := hCrashed.OK.Load()
	start := time.Now()
	if err := tr.inj.SetListenerFault(id, faults.ListenerFaultEMFILE, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	actortest.WaitOK(t, hCrashed, before+10)
	failedAll, _ := hCrashed.Failed()
	t.Logf("accept EMFILE for 2 s: serving again %v after it began, %d more failed connections", time.Since(start).Round(time.Millisecond), failedAll-failedBreak)
	if failedAll != failedBreak {
		t.Errorf("%d connections failed during the EMFILE fault, want 0 (they wait in the backlog)", failedAll-failedBreak)
	}
	close(stop)
	hCrashed.WG.Wait()
	hOthers.WG.Wait()
	for addr, errs := range hOthers.Failures {
		t.Errorf("%s (no fault): %d failed connections, first: %v", addr, len(errs), errs[0])
	}
}
