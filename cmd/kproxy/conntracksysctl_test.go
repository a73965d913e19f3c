package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// kube-proxy's defaults: nf_conntrack_max raised to max(32768 per CPU,
// 131072), an hour in CLOSE_WAIT, a day established, UDP left alone;
// a KubeProxyConfiguration's conntrack section and flags change them,
// and 0 leaves a setting alone.
func TestConntrackSettings(t *testing.T) {
	parse := func(args ...string) conntrackFlags {
		var c conntrackFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := parse()
	want := []sysctl{
		{"net/netfilter/nf_conntrack_max", 131072, true},
		{"net/netfilter/nf_conntrack_tcp_timeout_established", 86400, false},
		{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", 3600, false},
	}
	if got := c.settings(2); !slices.Equal(got, want) {
		t.Errorf("defaults on 2 CPUs: %v, want %v", got, want)
	}
	if got := c.settings(8)[0].value; got != 262144 {
		t.Errorf("nf_conntrack_max on 8 CPUs: %d, want 262144", got)
	}
	c = parse("--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=90s",
		"--conntrack-tcp-be-liberal", "--conntrack-udp-timeout=30s", "--conntrack-udp-timeout-stream=2m")
	want = []sysctl{
		{"net/netfilter/nf_conntrack_tcp_be_liberal", 1, false},
		{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", 90, false},
		{"net/netfilter/nf_conntrack_udp_timeout", 30, false},
		{"net/netfilter/nf_conntrack_udp_timeout_stream", 120, false},
	}
	if got := c.settings(2); !slices.Equal(got, want) {
		t.Errorf("flags: %v, want %v", got, want)
	}
	if c := parse("--conntrack-tcp-timeout-close-wait=-1s"); c.validate() == nil {
		t.Error("a negative timeout validates")
	}

	values, _, err := parseConfig([]byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
conntrack: {maxPerCore: 0, min: 5, tcpEstablishedTimeout: 2h, tcpCloseWaitTimeout: 30m, tcpBeLiberal: true, udpTimeout: 15s, udpStreamTimeout: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	for flag, v := range map[string]string{"conntrack-max-per-core": "0", "conntrack-min": "5", "conntrack-tcp-timeout-established": "2h0m0s",
		"conntrack-tcp-timeout-close-wait": "30m0s", "conntrack-tcp-be-liberal": "true", "conntrack-udp-timeout": "15s", "conntrack-udp-timeout-stream": "1m0s"} {
		if values[flag] != v {
			t.Errorf("config conntrack: --%s %q, want %q", flag, values[flag], v)
		}
	}
}

// applySysctls writes what differs, raises and never lowers a raise-only
// setting, reports what the kernel lacks, and names what it cannot write.
func TestApplySysctls(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "net", "netfilter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, v string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	write("nf_conntrack_max", "262144", 0o644)
	write("nf_conntrack_tcp_timeout_close_wait", "60", 0o644)
	write("nf_conntrack_tcp_timeout_established", "86400", 0o644)
	settings := []sysctl{
		{"net/netfilter/nf_conntrack_max", 131072, true},
		{"net/netfilter/nf_conntrack_tcp_timeout_established", 86400, false},
		{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", 3600, false},
		{"net/netfilter/nf_conntrack_udp_timeout", 30, false},
	}
	changed, missing, err := applySysctls(root, settings)
	if err != nil || !slices.Equal(changed, []string{"net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600"}) ||
		!slices.Equal(missing, []string{"net.netfilter.nf_conntrack_udp_timeout"}) {
		t.Errorf("changed %q, missing %q, %v; want close_wait changed, udp missing", changed, missing, err)
	}
	if read("nf_conntrack_max") != "262144" || read("nf_conntrack_tcp_timeout_close_wait") != "3600" {
		t.Errorf("max %s (want 262144, not lowered), close_wait %s (want 3600)", read("nf_conntrack_max"), read("nf_conntrack_tcp_timeout_close_wait"))
	}
	write("nf_conntrack_max", "65536", 0o644)
	if changed, _, err := applySysctls(root, settings[:1]); err != nil || !slices.Equal(changed, []string{"net.netfilter.nf_conntrack_max=131072"}) {
		t.Errorf("raising: %q, %v", changed, err)
	}
	if os.Geteuid() != 0 { // root writes a 0444 file anyway
		write("nf_conntrack_tcp_timeout_established", "5", 0o444)
		if _, _, err := applySysctls(root, settings[1:2]); err == nil || !strings.Contains(err.Error(), "nf_conntrack_tcp_timeout_established") {
			t.Errorf("read-only: %v, want an error naming the setting", err)
		}
	}
}
