package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// A panic in the data path (here injected into every dial to one service's
// endpoint) costs the connections it happens on and nothing else: under
// load on both services at once, the other service fails no request, the
// process lives on, and the panicking service serves again once the fault
// is gone.
func TestDataPathPanicCostsOnlyItsConnection(t *testing.T) {
	faults := datapath.NewFaults()
	p := startProxyWith(t, Config{Faults: faults})
	w := watchState(t, p)
	calmEP, boomEP := tcpBackends(t, 2), tcpBackends(t, 1)
	calm := svcPort("calm", messages.Protocol_TCP, "127.0.21.1", 18080)
	boom := svcPort("boom", messages.Protocol_TCP, "127.0.21.2", 18080)
	p.Submit(snapshot(1, spe(calm, endpoints(calmEP...)), spe(boom, endpoints(boomEP...))))
	w.listening(t, calm.GetKey().ID(), 1, 1)
	w.listening(t, boom.GetKey().ID(), 1, 1)
	if err := faults.Set(boomEP[0], datapath.FaultPanic, time.Minute); err != nil {
		t.Fatal(err)
	}

	const clients, requests = 4, 300 // per service, each client
	var calmFailed, boomServed, boomFailed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range requests {
				if err := roundTrip("127.0.21.1:18080"); err != nil {
					calmFailed.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range requests {
				if roundTrip("127.0.21.2:18080") == nil {
					boomServed.Add(1)
				} else {
					boomFailed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("calm: %d of %d failed; boom: %d failed, %d served", calmFailed.Load(), clients*requests, boomFailed.Load(), boomServed.Load())
	if calmFailed.Load() > 0 {
		t.Fatalf("%d of the calm service's %d requests failed while the other's handlers panicked", calmFailed.Load(), clients*requests)
	}
	if boomServed.Load() > 0 {
		t.Fatalf("%d requests through a panicking dial were served: the fault was not injected", boomServed.Load())
	}

	faults.Set(boomEP[0], datapath.FaultPanic, 0) // over at once
	if got := dialName(t, "127.0.21.2:18080"); got != "backend-0" {
		t.Fatalf("after the fault: reached %s", got)
	}
}
