package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// configured parses the run flags with args, then applies the config file.
func configured(t *testing.T, path string, args ...string) (*runOptions, error) {
	t.Helper()
	var o runOptions
	fs := runFlags(&o)
	if err := fs.Parse(append([]string{"--config", path}, args...)); err != nil {
		t.Fatal(err)
	}
	values, _, err := loadConfig(path)
	if err != nil {
		return nil, err
	}
	return &o, applyConfig(fs, values)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The ConfigMap kubeadm writes for kube-proxy loads as it is; its
// kube-proxy-only tuning is reported as ignored.
func TestConfigKubeadmKubeProxyConfigurationLoads(t *testing.T) {
	o, err := configured(t, "testdata/kube-proxy-kubeadm.yaml", "--source", "kube")
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || o.bindAddress != "0.0.0.0" || o.portalMode != portalAuto {
		t.Errorf("kubeadm's config: kubeconfig %q, bind %q, portal %q", o.kubeconfig, o.bindAddress, o.portalMode)
	}
	if err := o.validate(); err != nil {
		t.Errorf("kubeadm's config does not validate: %v", err)
	}
	_, ignored, _ := loadConfig("testdata/kube-proxy-kubeadm.yaml")
	if len(ignored) != 0 {
		t.Errorf("ignored fields %v, want none", ignored)
	}
	if o.clusterCIDR != "10.244.0.0/16" {
		t.Errorf("clusterCIDR: %q, want kubeadm's 10.244.0.0/16", o.clusterCIDR)
	}
}

func TestConfigMapsKubeProxyAndKproxySettings(t *testing.T) {
	path := writeFile(t, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
bindAddress: 127.0.0.2
healthzBindAddress: 127.0.0.1:20256
metricsBindAddress: 127.0.0.1:20249
hostnameOverride: node-7
clientConnection: {kubeconfig: /etc/k.conf, qps: 20, burst: 40}
configSyncPeriod: 5m
portRange: 30000-30999
nodePortAddresses: [192.0.2.0/24]
clusterCIDR: 198.51.100.0/24,2001:db8:42::/56
detectLocalMode: NodeCIDR
iptables: {syncPeriod: 10s, minSyncPeriod: 250ms}
---
apiVersion: kproxy.io/v1alpha1
kind: KproxyConfiguration
source: kube
serviceClusterIPRange: 198.18.0.0/16,2001:db8:5::/108
udpIdleTimeout: 45s
outliers: {consecutiveFailures: 5, baseEjectionTime: 3s, maxEjectionTime: 2m}
limits: {maxConnections: 5000, tcpIdleTimeout: 30m}
metrics: {servicePortsLimit: 50, actors: true}
tracing: {endpoint: "127.0.0.1:4317", samplingRatePerMillion: 250}
`)
	o, err := configured(t, path, "--bind-address", "127.0.0.3") // the flag wins
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string][2]any{
		"portal":             {o.portalMode, "iptables"},
		"bind (flag wins)":   {o.bindAddress, "127.0.0.3"},
		"healthz":            {o.healthzBindAddress, "127.0.0.1:20256"},
		"metrics":            {o.metricsBindAddress, "127.0.0.1:20249"},
		"node":               {o.nodeName, "node-7"},
		"kubeconfig":         {o.kubeconfig, "/etc/k.conf"},
		"qps":                {o.kubeAPIQPS, 20.0},
		"burst":              {o.kubeAPIBurst, 40},
		"config sync":        {o.configSyncPeriod.String(), "5m0s"},
		"port range":         {o.portRange, "30000-30999"},
		"node port addrs":    {o.nodePortAddrs, "192.0.2.0/24"},
		"sync period":        {o.syncPeriod.String(), "10s"},
		"min sync period":    {o.minSyncPeriod.String(), "250ms"},
		"source":             {o.source, "kube"},
		"udp idle":           {o.udpIdleTimeout.String(), "45s"},
		"outliers":           {o.outliers.ConsecutiveFailures, 5},
		"max conns":          {o.limits.maxConns, int64(5000)},
		"tcp idle":           {o.limits.tcpIdleTimeout.String(), "30m0s"},
		"metrics port limit": {o.metricsPortsLimit, 50},
		"metrics actors":     {o.metricsActors, true},
		"tracing endpoint":   {o.tracing.endpoint, "127.0.0.1:4317"},
		"tracing rate":       {o.tracing.samplingRatePerMillion, 250},
		"cluster CIDR":       {o.clusterCIDR, "198.51.100.0/24,2001:db8:42::/56"},
		"service CIDRs":      {o.serviceCIDRs, "198.18.0.0/16,2001:db8:5::/108"},
		"detect local mode":  {o.detectLocalMode, "NodeCIDR"},
	}
	if err := o.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: %v, want %v", name, c[0], c[1])
		}
	}
}

func TestConfigRejectsWithAClearError(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbindAdress: 0.0.0.0\n", `unknown field "bindAdress"`},
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n", `mode "ipvs"`},
		{"apiVersion: kproxy.io/v1alpha1\nkind: KproxyConfiguration\nlimits: {maxConnection: 5}\n", `unknown field "limits.maxConnection"`},
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection: {qpss: 5}\n", `unknown field "clientConnection.qpss"`},
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nBindAddress: 1.2.3.4\n", `unknown field "BindAddress"`},
		{"apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbindAddress: 1.2.3.4\nbindAddress: 1.2.3.5\n", "bindAddress"},
		{"apiVersion: v1\nkind: ConfigMap\n", "want kubeproxy.config.k8s.io/v1alpha1"},
		{"apiVersion: kproxy.io/v1alpha1\nkind: KproxyConfiguration\nudpIdleTimeout: soon\n", "udp-idle-timeout"},
	} {
		_, err := configured(t, writeFile(t, c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %s", c.doc, err, c.want)
		}
	}
}

// Dual-stack CIDR flags take one CIDR per family, as kube-proxy's and the
// API server's do.
func TestCIDRFlagsRefuseBadValues(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--cluster-cidr", "198.51.100.0/33", "--cluster-cidr"},
		{"--cluster-cidr", "198.51.100.0/24,203.0.113.0/24", "two of different families"},
		{"--service-cluster-ip-range", "198.18.0.0", "--service-cluster-ip-range"},
		{"--service-cluster-ip-range", "2001:db8::/64,2001:db8:1::/64", "two of different families"},
	} {
		var o runOptions
		fs := runFlags(&o)
		if err := fs.Parse([]string{"--source", "kube", c.flag, c.value}); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want an error naming %q", c.flag, c.value, err, c.want)
		}
	}
}

// --write-config-to writes what --config reads back to the same settings.
func TestWriteConfigRoundTrips(t *testing.T) {
	var o runOptions
	fs := runFlags(&o)
	args := []string{"--source", "kube", "--portal", "nftables", "--bind-address", "127.0.0.9", "--max-udp-flows", "-1",
		"--outlier-consecutive-failures", "4", "--metrics-actors", "--tracing-endpoint", "127.0.0.1:4317", "--nodeport-addresses", "192.0.2.0/24,2001:db8::/64", "--tcp-keepalive", "0s", "--tcp-event-loops=false", "--profiling",
		"--cluster-cidr", "198.51.100.0/24", "--service-cluster-ip-range", "198.18.0.0/16,2001:db8:5::/108"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	if err := writeConfig(&first, fs); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, first.String())
	var o2 runOptions
	fs2 := runFlags(&o2)
	values, _, err := loadConfig(path)
	if err != nil {
		t.Fatalf("the written config does not load: %v\n%s", err, first.String())
	}
	if err := applyConfig(fs2, values); err != nil {
		t.Fatal(err)
	}
	var second bytes.Buffer
	if err := writeConfig(&second, fs2); err != nil {
		t.Fatal(err)
	}
	if first.String() != second.String() {
		t.Fatalf("round trip changed the config:\n%s\n---- became ----\n%s", first.String(), second.String())
	}
	if o2.bindAddress != "127.0.0.9" || o2.limits.maxFlows != -1 || !o2.metricsActors || o2.limits.tcpKeepAlive != 0 || o2.limits.tcpEventLoops || !o2.profiling ||
		o2.clusterCIDR != "198.51.100.0/24" || o2.serviceCIDRs != "198.18.0.0/16,2001:db8:5::/108" {
		t.Errorf("round trip: %+v", o2)
	}
}

// With no mode named, the sync periods come from the iptables section, as
// kube-proxy's own conversion reads them; with mode nftables, from its own.
func TestConfigSyncPeriodsFollowKubeProxy(t *testing.T) {
	doc := `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %s
iptables: {syncPeriod: 11s, minSyncPeriod: 110ms}
nftables: {syncPeriod: 22s, minSyncPeriod: 220ms}
`
	for mode, want := range map[string]string{`""`: "11s", "iptables": "11s", "nftables": "22s"} {
		o, err := configured(t, writeFile(t, fmt.Sprintf(doc, mode)))
		if err != nil {
			t.Fatal(err)
		}
		if got := o.syncPeriod.String(); got != want {
			t.Errorf("mode %s: sync period %s, want %s", mode, got, want)
		}
	}
}

// --write-config-to leaves the node name out when it is this node's
// default, so the file can be every node's ConfigMap.
func TestWriteConfigLeavesTheDefaultNodeNameOut(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{{nil, ""}, {[]string{"--node-name", "node-7"}, "node-7"}} {
		var o runOptions
		fs := runFlags(&o)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := writeConfig(&b, fs); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), fmt.Sprintf("hostnameOverride: %q", c.want)) && !strings.Contains(b.String(), "hostnameOverride: "+c.want+"\n") {
			t.Errorf("args %v: want hostnameOverride %q in\n%s", c.args, c.want, b.String())
		}
	}
}

// The remote section sets the --remote-* flags of a node proxy fed by a core.
func TestConfigRemoteSection(t *testing.T) {
	path := writeFile(t, `apiVersion: kproxy.io/v1alpha1
kind: KproxyConfiguration
source: remote:10.0.0.5:7400
remote: {listen: "10.0.0.7:7401", tokenFile: /etc/kproxy/token, allowNonLoopback: true, tlsCert: c.pem, tlsKey: k.pem, tlsCA: ca.pem}
`)
	o, err := configured(t, path)
	if err != nil {
		t.Fatal(err)
	}
	r := o.remote
	if o.source != "remote:10.0.0.5:7400" || r.listen != "10.0.0.7:7401" || r.tokenFile != "/etc/kproxy/token" || !r.allowNonLoopback ||
		r.tlsCert != "c.pem" || r.tlsKey != "k.pem" || r.tlsCA != "ca.pem" {
		t.Fatalf("remote settings: source %q, %+v", o.source, r)
	}
	if err := o.sourceFlags.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	o.remote.tokenFile = ""
	if err := o.sourceFlags.validate(); err == nil || !strings.Contains(err.Error(), "--remote-token-file is required") {
		t.Fatalf("non-loopback remoting without a token: %v", err)
	}
}

// --preserve-source-ip-for-local-traffic-policy: unless given on the
// command line or in the config file, on in the kernel portal modes and
// off in bind and netsh; given, as given.
func TestPreserveSourceIPFollowsThePortalMode(t *testing.T) {
	dir := t.TempDir()
	off := filepath.Join(dir, "off.yaml")
	if err := os.WriteFile(off, []byte("apiVersion: kproxy.io/v1alpha1\nkind: KproxyConfiguration\npreserveSourceIPForLocalTrafficPolicy: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		mode string
		want bool
	}{
		{nil, "nftables", true},
		{nil, "iptables", true},
		{nil, "bind", false},
		{nil, "netsh", false},
		{[]string{"--preserve-source-ip-for-local-traffic-policy=false"}, "nftables", false},
		{[]string{"--preserve-source-ip-for-local-traffic-policy"}, "bind", true},
		{[]string{"--config", off}, "nftables", false},
	} {
		var o runOptions
		fs := runFlags(&o)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if o.config != "" {
			values, _, err := loadConfig(o.config)
			if err != nil {
				t.Fatal(err)
			}
			if err := applyConfig(fs, values); err != nil {
				t.Fatal(err)
			}
		}
		o.preserveSourceIPGiven = given(fs, "preserve-source-ip-for-local-traffic-policy")
		o.resolvePreserveSourceIP(tc.mode)
		if o.preserveSourceIPForLocal != tc.want {
			t.Errorf("%q in mode %s: %v, want %v", tc.args, tc.mode, o.preserveSourceIPForLocal, tc.want)
		}
	}
}
