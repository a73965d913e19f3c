package main

import (
	"os"
	"testing"
)

// FuzzConfig: whatever the config file holds, decoding never panics, and
// what it accepts either sets the run flags or is refused with an error.
func FuzzConfig(f *testing.F) {
	if raw, err := os.ReadFile("testdata/kube-proxy-kubeadm.yaml"); err == nil {
		f.Add(raw)
	}
	f.Add([]byte("apiVersion: kproxy.io/v1alpha1\nkind: KproxyConfiguration\nsource: kube\nlimits: {maxConnections: 5, tcpIdleTimeout: 1m}\n"))
	f.Add([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nnodePortAddresses: [192.0.2.0/24]\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		values, _, err := parseConfig(raw)
		if err != nil {
			return
		}
		var o runOptions
		_ = applyConfig(runFlags(&o), values) // may refuse a value; must not panic
	})
}
