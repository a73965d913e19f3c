//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// adminAddr is the admin API of the last kproxy started (two overlap
// during a hand-over, each with its own).
func (e *env) adminAddr() string {
	if e.adminAt != "" {
		return e.adminAt
	}
	return binarytest.AdminAddress
}

// spState is what the admin API's GET /state says of one service port.
type spState struct {
	Key struct {
		Namespace, Name, PortName, Protocol string
	} `json:"key"`
	ListenAddresses []string          `json:"listenAddresses"`
	ProxyPort       int               `json:"proxyPort"`
	Restarts        int               `json:"restarts"`
	Endpoints       []json.RawMessage `json:"endpoints"`
	Error           string            `json:"error"`
	Deleted         bool              `json:"deleted"`
	ServicePort     struct {
		AnnotationErrors []string `json:"annotationErrors"`
		ProxyProtocol    string   `json:"proxyProtocol"`
		PreserveSourceIP bool     `json:"preserveSourceIp"`
	} `json:"servicePort"`
}

func (s spState) id() string {
	return fmt.Sprintf("%s/%s:%s/%s", s.Key.Namespace, s.Key.Name, s.Key.PortName, s.Key.Protocol)
}

// state asks the admin API, from inside the node, for the service ports
// (deleted ones left out).
func (e *env) state() (map[string]spState, error) {
	sps, err := binarytest.State[spState](e.tp.Node.HTTPClient(2*time.Second), e.adminAddr(), e.tokenFile)
	if err != nil {
		return nil, err
	}
	st := map[string]spState{}
	for _, sp := range sps {
		if !sp.Deleted {
			st[sp.id()] = sp
		}
	}
	return st, nil
}

// waitState polls GET /state (every 50 ms, at most 15 s) until ok; p, if
// set, must not exit meanwhile.
func (e *env) waitState(t *testing.T, p *proc, what string, ok func(map[string]spState) bool) map[string]spState {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var st map[string]spState
	var err error
	for i := 0; ; i++ {
		if p != nil {
			select {
			case <-p.Done():
				t.Fatalf("kproxy exited (%v) while waiting for %s; end of its log:\n%s", p.Err(), what, binarytest.Tail(p.Log, 40))
			default:
			}
		}
		if st, err = e.state(); err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) || i > 1000 {
			t.Fatalf("no %s within 15s: state %+v, error %v", what, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits until every service port in sps has a proxy port and
// listen addresses, and no others are there. The listeners must be on the
// unspecified address, at the proxy port.
func (e *env) waitReady(t *testing.T, p *proc, sps []string) map[string]spState {
	t.Helper()
	start := time.Now()
	st := e.waitState(t, p, "ready service ports "+strings.Join(sps, " "), func(st map[string]spState) bool {
		if len(st) != len(sps) {
			return false
		}
		for _, sp := range sps {
			s, ok := st[sp]
			if !ok || s.ProxyPort == 0 || len(s.ListenAddresses) == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("%d service ports ready after %v", len(sps), time.Since(start).Round(time.Millisecond))
	for _, sp := range sps {
		s := st[sp]
		for _, a := range s.ListenAddresses {
			if !unspecified(a, s.ProxyPort) {
				t.Errorf("%s listens on %q, want the unspecified address at proxy port %d", sp, a, s.ProxyPort)
			}
		}
		if s.Error != "" {
			t.Errorf("%s reports error %q", sp, s.Error)
		}
	}
	if n := len(st[spWebTCP].Endpoints); n != 4 {
		t.Errorf("%s has %d endpoints, want 4", spWebTCP, n)
	}
	if n := len(st[spEmptyTCP].Endpoints); n != 0 {
		t.Errorf("%s has %d endpoints, want 0", spEmptyTCP, n)
	}
	return st
}

// unspecified reports whether a listen address is the unspecified
// address (as Go prints a wildcard listener: ":port", or "[::]:port",
// "0.0.0.0:port") at port.
func unspecified(addr string, port int) bool {
	host, p, err := net.SplitHostPort(addr)
	if err != nil || p != strconv.Itoa(port) {
		return false
	}
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// adminRequest is a request to the admin API with the token and, for a
// body, JSON's content type.
func (e *env) adminRequest(method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := binarytest.AdminRequest(method, e.adminAddr(), path, e.tokenFile, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}
