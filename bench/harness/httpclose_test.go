package harness

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// cannedServer answers each connection's request with resp and closes,
// or (hold) keeps the connection open until the client closes it.
func cannedServer(t *testing.T, resp string, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				io.WriteString(c, resp)
				if hold {
					io.Copy(io.Discard, rd)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// exchange makes one close-mode request to addr, bounded by d.
func exchange(t *testing.T, addr string, d time.Duration) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	return closeExchange(c, make([]byte, 4096))
}

// The client takes a 200 that is whole and the server's close as a
// request served, and nothing else: another status, a response cut
// short (in its headers or its body) and a server that never closes fail.
func TestCloseClientChecksResponse(t *testing.T) {
	for _, c := range []struct {
		name, resp string
		hold       bool
		want       string // in the error; "" for none
	}{
		{"ok", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n", false, ""},
		{"ok without a length", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nok\n", false, ""},
		{"500", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\n\r\nok\n", false, "status"},
		{"2000", "HTTP/1.1 2000 OK\r\nContent-Length: 3\r\n\r\nok\n", false, "status"},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n", false, "status"},
		{"nothing", "", false, "no response"},
		{"cut in the headers", "HTTP/1.1 200 OK\r\nContent-Len", false, "truncated"},
		{"cut in the body", "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok\n", false, "truncated"},
		{"body too long", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok\n", false, "over content-length"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\nok\n", false, "content-length"},
		{"never closed", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", true, "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := exchange(t, cannedServer(t, c.resp, c.hold), 300*time.Millisecond)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// A load in close mode counts every bad response as a failed request.
func TestCloseLoadCountsFailures(t *testing.T) {
	addr := cannedServer(t, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", false)
	res, err := runLoad(context.Background(), loadSpec{Mode: ModeClose, Addrs: []string{addr}, Clients: 2, Duration: 5 * time.Second, MaxOps: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || res.Errors != 20 || len(res.ErrSamples) == 0 || !strings.Contains(res.ErrSamples[0], "503") {
		t.Fatalf("%d ok, %d failed %v: want 20 failed, saying 503", res.Ops, res.Errors, res.ErrSamples)
	}
}

// The Go fallback and the client agree: its response is a whole 200 and
// it closes first; the startup probe sees it forward.
func TestCloseGoHTTP(t *testing.T) {
	h, err := backends.StartHTTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for range 3 {
		if err := exchange(t, h.Addr(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if accepted, forwarded := probeOnce(h.Addr(), ModeClose); !accepted || !forwarded {
		t.Fatalf("probe: accepted %v, forwarded %v", accepted, forwarded)
	}
	b, err := startBackends(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stop, err := b.startHTTP(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if b.HTTPServer != httpServerGo || b.HTTPPort == 0 {
		t.Errorf("without nginx: server %q, port %d", b.HTTPServer, b.HTTPPort)
	}
	stop()
	if b.HTTPPort != 0 || b.HTTPServer != "" {
		t.Errorf("stopped, yet port %d, server %q", b.HTTPPort, b.HTTPServer)
	}
}

func TestNginxHTTPConfig(t *testing.T) {
	dir := t.TempDir()
	path, err := writeNginxHTTPConfig(dir, []string{"127.1.0.1", "127.1.0.2"}, 9080, nginxHTTPTempPaths("--with-http_ssl_module --without-http_uwsgi_module"))
	if err != nil {
		t.Fatal(err)
	}
	udp, err := writeNginxConfig(dir, 1, &Backends{IPs: []string{"127.1.0.1"}, UDPPort: 9053})
	if err != nil {
		t.Fatal(err)
	}
	if path == udp {
		t.Fatalf("the HTTP server's config %s is the UDP peer's", path)
	}
	raw, _ := os.ReadFile(path)
	cfg := string(raw)
	for _, want := range []string{"daemon off;", "worker_processes 1;", "http {", "access_log off;", "keepalive_timeout 0;",
		"listen 127.1.0.1:9080 backlog=4096;\n    listen 127.1.0.2:9080 backlog=4096;", "location / {\n      return 200 \"ok\\n\";",
		"client_body_temp_path " + dir, "proxy_temp_path", "scgi_temp_path", "pid " + dir + "/nginx-http.pid;"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "uwsgi") || strings.Contains(cfg, "stream") {
		t.Errorf("config has a module's temp path the nginx lacks, or a stream:\n%s", cfg)
	}
}

// nginx, where installed, serves the close mode on every backend IP: a
// load through it fails nothing, and it ends when stopped.
func TestNginxHTTP(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx is not installed (make bench-deps)")
	}
	b, err := startBackends(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := t.TempDir()
	stop, err := b.startHTTP(context.Background(), bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if b.HTTPServer != httpServerNginx {
		t.Fatalf("server %q, want nginx", b.HTTPServer)
	}
	addrs := directAddrs(b, 2, ModeClose)
	res, err := runLoad(context.Background(), loadSpec{Mode: ModeClose, Addrs: addrs, Clients: 2, Duration: 5 * time.Second, MaxOps: 200})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 200 || res.Errors != 0 || res.OK[0] == 0 || res.OK[1] == 0 {
		t.Fatalf("%d ok (%v per address), %d failed %v", res.Ops, res.OK, res.Errors, res.ErrSamples)
	}
	stop()
	if c, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after stop", addrs[0])
	}
}
