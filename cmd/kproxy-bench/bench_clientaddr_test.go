package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/bench/harness"
	"github.com/kproxy/kproxy/test/binarytest"
)

// TestBenchClientAddress runs kproxy-bench client-address, short: the
// real kproxy with the nftables portal in namespaces the harness creates
// and removes. Every mode (plain, transparent, PROXY v1, v2) carries
// connections and keep-alive requests without a failure, kproxy's CPU
// per connection is read for each, and each mode's endpoint saw the
// address it should: the node's on the plain path, the client's own
// through transparent proxying (its socket's peer) and in the PROXY
// headers.
func TestBenchClientAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("network namespaces and nftables: Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, nftables)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	kproxy := binarytest.Build(t)
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.html")
	var out bytes.Buffer
	code := benchMain([]string{"client-address", "--modes", "conn,keepalive", "--clients", "4", "--rounds", "1", "--duration", "500ms",
		"--kproxy", kproxy, "--quiet", "--work-dir", filepath.Join(dir, "work"), "--json", jsonPath, "--html", htmlPath}, &out)
	if code != 0 {
		raw, _ := os.ReadFile(filepath.Join(dir, "work", harness.ScenarioClientAddress, "kproxy.log"))
		t.Fatalf("kproxy-bench client-address: exit %d\n%s\nkproxy's log:\n%s", code, out.String(), raw[max(0, len(raw)-3000):])
	}
	t.Logf("\n%s", out.String())
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep harness.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Error != "" || rep.Scenarios[0].Skipped != "" {
		t.Fatalf("scenarios %+v", rep.Scenarios)
	}
	s := rep.Scenarios[0]
	modes := []string{"plain", "transparent", "proxy-v1", "proxy-v2"}
	for _, load := range []string{"conn", "keepalive"} {
		for _, m := range modes {
			n := 0
			for _, r := range s.Rounds {
				if r.Mode != load || r.Target != m {
					continue
				}
				n++
				if r.Ops == 0 || r.Errors != 0 || r.CPUMicrosPerOp <= 0 {
					t.Errorf("%s %s round %d: %d ok, %d failed, %.1f µs CPU per op %v", load, m, r.Round, r.Ops, r.Errors, r.CPUMicrosPerOp, r.ErrSamples)
				}
			}
			if n != 1 {
				t.Errorf("%s %s: %d rounds, want 1", load, m, n)
			}
		}
	}
	for _, f := range []string{"conn transparent: CPU per connection over plain", "conn proxy-v2: connections/s", "keepalive proxy-v1: CPU per request"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("the table has no %q", f)
		}
	}
	d := s.ClientAddress
	if d == nil {
		t.Fatal("no clientAddress detail in the JSON")
	}
	for _, m := range modes {
		want := d.Client
		if m == "plain" {
			want = d.Node
		}
		seen := d.Seen[m]
		if len(seen) != 1 || seen[want] == 0 {
			t.Errorf("%s: the endpoint saw %v, want only %s", m, seen, want)
		}
	}
	html, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("client-address")) || bytes.Count(html, []byte("echarts.init")) < 3 {
		t.Errorf("the HTML report lacks the scenario or its charts")
	}
}
