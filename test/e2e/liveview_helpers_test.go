//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The live view's tests share these: a manifest of n services on
// 127.0.0.0/8, a free loopback port, and the page's JSON and event stream.

// liveViewManifest writes n services, svc-NNNNN in namespace lv, each on
// its own cluster IP in 127.60.0.0/14, port 18080, one endpoint (never
// dialled); every fifth has ClientIP affinity.
func liveViewManifest(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		affinity := ""
		if i%5 == 0 {
			affinity = "\n  sessionAffinity: ClientIP"
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: svc-%05[1]d, namespace: lv}
spec:
  clusterIP: 127.%[2]d.%[3]d.%[4]d%[5]s
  ports: [{name: p, protocol: TCP, port: 18080, targetPort: 9000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-%05[1]d, namespace: lv, labels: {kubernetes.io/service-name: svc-%05[1]d}}
addressType: IPv4
ports: [{name: p, protocol: TCP, port: 9000}]
endpoints:
- {addresses: [127.59.0.1], conditions: {ready: true}}
`, i, 60+i/62500, i/250%250, 1+i%250, affinity)
	}
	path := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func lvServicePort(i int) string { return fmt.Sprintf("lv/svc-%05d:p/TCP", i) }

// freeLoopbackPort is a TCP port on 127.0.0.1 nobody listens on now.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lvPage is the part of GET /api/servicePorts the tests read.
type lvPage struct {
	Total, Matched, Offset, Limit int
	Items                         []struct {
		ID     string
		Listen []string
		Actors []struct {
			Role     string
			Restarts int
			Status   string
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// waitServicePorts polls /api/tree until the live view has n service
// ports, each listening (checked on the first page).
func waitServicePorts(t *testing.T, ui string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var tree struct{ ServicePorts int }
		resp, err := http.Get("http://" + ui + "/api/tree")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&tree)
			resp.Body.Close()
			if tree.ServicePorts == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live view has %d service ports after %v, want %d (last error %v)", tree.ServicePorts, within, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Kind string
	Data map[string]any
	At   time.Time // when the client read it
}

// sseStream reads GET /api/events into a channel until the test ends.
func sseStream(t *testing.T, ui string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+ui+"/api/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /api/events: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan sseEvent, 1<<14)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				e.Kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e.Data)
			case line == "":
				e.At = time.Now()
				select {
				case ch <- e:
				default: // the test stopped reading
				}
				e = sseEvent{}
			}
		}
	}()
	return ch
}

// awaitEvent reads the stream until match holds or the deadline passes;
// the stream must not end (no reconnecting).
func awaitEvent(t *testing.T, ch <-chan sseEvent, within time.Duration, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream ended while waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s within %v", what, within)
		}
	}
}

// assetRefs are the src and href values of a page.
var assetRefs = regexp.MustCompile(`(?:src|href)="([^"]+)"`)
