package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// TestThousandServicePorts opens 1,000 service ports from one file and
// checks that every one of them forwards.
func TestThousandServicePorts(t *testing.T) {
	const n = 1000
	backendIPs := []string{"127.0.31.11", "127.0.31.12", "127.0.31.13"}
	port := backendsOn(t, backendIPs...)
	var manifest strings.Builder
	clusterIP := func(i int) string { return fmt.Sprintf("127.0.%d.%d", 40+i/250, 1+i%250) }
	for i := range n {
		manifest.WriteString(service(fmt.Sprintf("svc-%04d", i), clusterIP(i), 18080, port, backendIPs...))
	}
	in := startKproxy(t, manifest.String())
	in.waitFor(t, fmt.Sprintf("%d service ports listening", n), func(m map[string]*messages.ServicePortState) bool {
		ready := 0
		for _, st := range m {
			if len(st.GetListenAddresses()) == 1 && len(st.GetEndpoints()) == 3 {
				ready++
			}
		}
		return ready == n
	})

	// Every service port forwards; 16 clients at a time keep the load bounded.
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	reached := map[string]int{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name, err := tryReadName(clusterIP(i) + ":18080")
				if err != nil {
					name = err.Error()
				}
				mu.Lock()
				reached[name]++
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	total := 0
	for _, ip := range backendIPs {
		total += reached[ip]
	}
	if total != n {
		t.Fatalf("want %d connections to reach the backends, got %v", n, reached)
	}
}
