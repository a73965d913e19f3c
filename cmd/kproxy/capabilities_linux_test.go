package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The effective set comes from /proc/PID/status's CapEff line.
func TestEffectiveCapabilities(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte("Name:\tkproxy\nCapInh:\t0000000000000000\nCapPrm:\t0000000000001000\nCapEff:\t0000000000001000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if eff, ok := effectiveCapabilities(path); !ok || eff != 1<<capNetAdmin {
		t.Fatalf("effectiveCapabilities = %#x, %v; want CAP_NET_ADMIN alone", eff, ok)
	}
	if _, ok := effectiveCapabilities(filepath.Join(t.TempDir(), "missing")); ok {
		t.Fatal("a missing status file read as a capability set")
	}
}
