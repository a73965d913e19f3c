package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/test/backends"
)

// instance is kproxy's run() started on a manifest file, with its state
// events recorded so a test can wait for a condition instead of sleeping.
type instance struct {
	proxy  *actors.Proxy
	path   string
	logs   *syncBuffer
	mu     sync.Mutex
	cond   *sync.Cond
	latest map[string]*messages.ServicePortState
}

func startKproxy(t *testing.T, manifest string) *instance {
	t.Helper()
	return startKproxyWith(t, manifest, nil)
}

// startKproxyWith lets a test change the run options first.
func startKproxyWith(t *testing.T, manifest string, opts func(*runOptions)) *instance {
	t.Helper()
	in := &instance{path: filepath.Join(t.TempDir(), "services.yaml"), logs: &syncBuffer{}, latest: map[string]*messages.ServicePortState{}}
	in.cond = sync.NewCond(&in.mu)
	in.write(t, manifest)
	ctx, cancel := context.WithCancel(context.Background())
	o := runOptions{
		sourceFlags: sourceFlags{source: "file:" + in.path, nodeName: "node-a", filePollInterval: 20 * time.Millisecond,
			kubeAPIQPS: 5, kubeAPIBurst: 10, minSyncPeriod: 10 * time.Millisecond},
		portalMode: datapath.ModeBind, bindAddress: "127.0.0.1", udpIdleTimeout: datapath.DefaultUDPIdleTimeout,
		adminAddress: DefaultAdminAddress}
	if opts != nil {
		opts(&o)
	}
	log := zerolog.New(in.logs)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, o, datapath.PortRange{}, log, func(p *actors.Proxy) {
			in.proxy = p
			p.Subscribe(func(st *messages.ServicePortState) {
				in.mu.Lock()
				in.latest[st.GetKey().ID()] = st
				in.mu.Unlock()
				in.cond.Broadcast()
			})
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("kproxy did not stop")
		}
	})
	return in
}

func (in *instance) write(t *testing.T, manifest string) {
	t.Helper()
	// Write and rename, as editors do, so the poller never reads half a file.
	tmp := in.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, in.path); err != nil {
		t.Fatal(err)
	}
}

// waitFor blocks until ok holds on the latest state of every service port.
func (in *instance) waitFor(t *testing.T, what string, ok func(map[string]*messages.ServicePortState) bool) {
	t.Helper()
	timer := time.AfterFunc(30*time.Second, in.cond.Broadcast)
	defer timer.Stop()
	deadline := time.Now().Add(30 * time.Second)
	in.mu.Lock()
	defer in.mu.Unlock()
	for !ok(in.latest) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		in.cond.Wait()
	}
}

// waitListening waits until id listens and has n endpoints.
func (in *instance) waitListening(t *testing.T, id string, endpoints int) {
	t.Helper()
	in.waitFor(t, fmt.Sprintf("%s listening with %d endpoints", id, endpoints), func(m map[string]*messages.ServicePortState) bool {
		st := m[id]
		return st != nil && !st.GetDeleted() && len(st.GetListenAddresses()) > 0 && len(st.GetEndpoints()) == endpoints
	})
}

// logged reports whether kproxy logged msg.
func (in *instance) logged(msg string) bool { return strings.Contains(in.logs.String(), msg) }

type syncBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	grew chan struct{} // closed by the next Write, so a reader can wait for a line
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grew != nil {
		close(s.grew)
		s.grew = nil
	}
	return s.b.Write(p)
}

// next returns the text so far and a channel closed at the next Write.
func (s *syncBuffer) next() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grew == nil {
		s.grew = make(chan struct{})
	}
	return s.b.String(), s.grew
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// service renders a Service and its EndpointSlice.
func service(name, clusterIP string, port int, targetPort int, endpointIPs ...string) string {
	var eps strings.Builder
	for _, ip := range endpointIPs {
		fmt.Fprintf(&eps, "- addresses: [%q]\n", ip)
	}
	return fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  clusterIP: %[2]s
  ports: [{name: tcp, port: %[3]d, targetPort: %[4]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: default
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: tcp, port: %[4]d}]
endpoints:
%[5]s`, name, clusterIP, port, targetPort, eps.String())
}

func readName(t *testing.T, addr string) string {
	t.Helper()
	name, err := tryReadName(addr)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// tryReadName connects and returns the name the backend sends; safe off the test goroutine.
func tryReadName(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	name, err := backends.ReadName(bufio.NewReader(c))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", addr, err)
	}
	return name, nil
}

// backendsOn starts TCP backends on the given loopback IPs, all on one port
// (an EndpointSlice's port is shared by its endpoints).
func backendsOn(t *testing.T, ips ...string) int {
	t.Helper()
	port := 0
	for _, ip := range ips {
		b, err := backends.StartTCP(ip, net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			t.Fatalf("backend on %s: %v", ip, err)
		}
		t.Cleanup(b.Close)
		port = b.Port() // the first picks a free port, the rest share it
	}
	return port
}
