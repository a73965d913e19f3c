package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/cmd/kproxy/liveview"
	"github.com/kproxy/kproxy/portal/datapath"
)

// The live view shows every service port and endpoint: a non-loopback
// --ui-address is refused at start unless --ui-allow-non-loopback.
func TestUIAddressMustBeLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		allow bool
		ok    bool
	}{
		{"127.0.0.1:10261", false, true},
		{"[::1]:10261", false, true},
		{"localhost:10261", false, true},
		{":10261", false, false},
		{"0.0.0.0:10261", false, false},
		{"192.0.2.1:10261", false, false},
		{"0.0.0.0:10261", true, true},
		{"no-port", true, false},
	} {
		o := runOptions{sourceFlags: sourceFlags{source: "kube", kubeAPIQPS: 5, kubeAPIBurst: 10}, portalMode: datapath.ModeBind,
			bindAddress: "127.0.0.1", udpIdleTimeout: time.Second, uiAddress: tc.addr, uiAllowNonLoopback: tc.allow}
		err := o.validate()
		if (err == nil) != tc.ok {
			t.Errorf("--ui-address %q, allow %v: %v, want ok=%v", tc.addr, tc.allow, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--ui-address") {
			t.Errorf("--ui-address %q: the error %q does not name the flag", tc.addr, err)
		}
	}
	var o runOptions
	if err := runFlags(&o).Parse(nil); err != nil || o.uiAddress != liveview.DefaultAddress {
		t.Fatalf("default --ui-address %q (%v), want %s", o.uiAddress, err, liveview.DefaultAddress)
	}
}

// The config file's ui section sets both flags; an empty address turns
// the live view off, and survives --write-config-to.
func TestConfigUISection(t *testing.T) {
	o, err := configured(t, writeFile(t, `apiVersion: kproxy.io/v1alpha1
kind: KproxyConfiguration
ui: {address: "0.0.0.0:10300", allowNonLoopback: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if o.uiAddress != "0.0.0.0:10300" || !o.uiAllowNonLoopback {
		t.Fatalf("ui section: address %q, allowNonLoopback %v", o.uiAddress, o.uiAllowNonLoopback)
	}
	o, err = configured(t, writeFile(t, `apiVersion: kproxy.io/v1alpha1
kind: KproxyConfiguration
ui: {address: ""}
`))
	if err != nil {
		t.Fatal(err)
	}
	if o.uiAddress != "" {
		t.Fatalf(`ui: {address: ""} left --ui-address %q, want it off`, o.uiAddress)
	}

	var off runOptions
	fs := runFlags(&off)
	if err := fs.Parse([]string{"--ui-address", ""}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := writeConfig(&b, fs); err != nil {
		t.Fatal(err)
	}
	back, err := configured(t, writeFile(t, b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if back.uiAddress != "" {
		t.Fatalf("--write-config-to with --ui-address \"\" reads back as %q:\n%s", back.uiAddress, b.String())
	}
}
