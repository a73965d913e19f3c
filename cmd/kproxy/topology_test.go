package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// watchedService is what the tests read of one kproxy watch --json line.
type watchedService struct {
	Service struct {
		Name string
		IPs  struct {
			ClusterIPs      struct{ V4 []string }
			LoadBalancerIPs *struct{ V4 []string }
		}
	}
	Endpoints []struct{ IPs struct{ V4 []string } }
}

func (w watchedService) endpoints() []string {
	var out []string
	for _, e := range w.Endpoints {
		out = append(out, e.IPs.V4...)
	}
	slices.Sort(out)
	return out
}

// watchFirstState runs this test binary as `kproxy watch --json` with args
// and returns its first state (the lines up to the first blank one) by
// service name, and what it logged.
func watchFirstState(t *testing.T, args ...string) (map[string]watchedService, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"watch", "--json", "--file-poll-interval", "1h"}, args...)...)
	cmd.Env = append(os.Environ(), asKproxyEnv+"=1")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	state := map[string]watchedService{}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			return state, logs.String()
		}
		var w watchedService
		if err := json.Unmarshal([]byte(line), &w); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		state[w.Service.Name] = w
	}
	t.Fatalf("kproxy watch %s ended before its first state (%v); logs:\n%s", strings.Join(args, " "), sc.Err(), logs.String())
	return nil, ""
}

// kproxy watch, on slices written for trafficDistribution PreferSameNode
// and PreferSameZone, gives each node the endpoints kube-proxy gives it:
// the ones hinted for the node, else for its zone (--node-zone, as a file
// source has no Node objects), else all of them.
func TestWatchTopologyHints(t *testing.T) {
	for _, c := range []struct {
		args       []string
		web, zonal []string
	}{
		{[]string{"--node-name", "node-a"}, []string{"192.0.2.11"}, []string{"192.0.2.21", "192.0.2.22"}},
		// Named in no node hint, no zone: every endpoint.
		{[]string{"--node-name", "node-d"}, []string{"192.0.2.11", "192.0.2.12", "192.0.2.13"}, []string{"192.0.2.21", "192.0.2.22"}},
		// Named in no node hint, in zone-b: the zone's endpoints.
		{[]string{"--node-name", "node-d", "--node-zone", "zone-b"}, []string{"192.0.2.12"}, []string{"192.0.2.22"}},
	} {
		state, logs := watchFirstState(t, append([]string{"--source", "file:testdata/topology.yaml"}, c.args...)...)
		for name, want := range map[string][]string{"web": c.web, "zonal": c.zonal} {
			if got := state[name].endpoints(); !slices.Equal(got, want) {
				t.Errorf("%v: %s endpoints %v, want %v; logs:\n%s", c.args, name, got, want, logs)
			}
		}
	}
}

// A load-balancer IP the cloud reports in ipMode Proxy gets no rule, and a
// cluster IP written with leading zeros is served as the decimal address
// kube-proxy reads, not refused.
func TestWatchIPModeAndLegacyAddresses(t *testing.T) {
	state, logs := watchFirstState(t, "--source", "file:testdata/topology.yaml", "--node-name", "node-a")
	lb := state["lb"].Service.IPs.LoadBalancerIPs
	if lb == nil || !slices.Equal(lb.V4, []string{"198.51.100.8"}) {
		t.Errorf("lb: load-balancer IPs %+v, want only the VIP-mode 198.51.100.8", lb)
	}
	legacy, ok := state["legacy"]
	if !ok {
		t.Fatalf("service legacy is not served; logs:\n%s", logs)
	}
	if got := legacy.Service.IPs.ClusterIPs.V4; !slices.Equal(got, []string{"198.18.0.13"}) {
		t.Errorf("legacy: cluster IPs %v, want [198.18.0.13]", got)
	}
	if got := legacy.endpoints(); !slices.Equal(got, []string{"192.0.2.31"}) {
		t.Errorf("legacy: endpoints %v, want [192.0.2.31]", got)
	}
}

// --node-zone is the file source's: with kube the Node's label decides, a
// core serves many nodes.
func TestNodeZoneOnlyForTheFileSource(t *testing.T) {
	for _, args := range [][]string{
		{"--source", "kube", "--node-zone", "zone-a"},
		{"--source", "file:testdata/topology.yaml", "--serve", "127.0.0.1:0", "--node-zone", "zone-a"},
	} {
		err := watchCommand(args, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), "--node-zone") {
			t.Errorf("%v: error %v, want one naming --node-zone", args, err)
		}
	}
}

// The config file's nodeZone is --node-zone, and --write-config-to keeps it.
func TestConfigNodeZone(t *testing.T) {
	o, err := configured(t, writeFile(t, "apiVersion: kproxy.io/v1alpha1\nkind: KproxyConfiguration\nsource: file:testdata/topology.yaml\nnodeZone: zone-b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o.nodeZone != "zone-b" || o.options().Zone != "zone-b" {
		t.Fatalf("nodeZone: flag %q, source zone %q, want zone-b", o.nodeZone, o.options().Zone)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	fs := runFlags(&runOptions{})
	if err := fs.Parse([]string{"--node-zone", "zone-c"}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := writeConfig(&out, fs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nodeZone: zone-c") {
		t.Fatalf("written config lacks nodeZone:\n%s", out.String())
	}
}
