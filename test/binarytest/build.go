package binarytest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// kproxyPackage is what Build builds: by import path, so the build finds
// the module from the test's directory, wherever that is.
const kproxyPackage = "github.com/kproxy/kproxy/cmd/kproxy"

// Build builds the kproxy binary into the test's temporary directory (never
// into the source tree) and returns its path; call it once per test.
//
// $KPROXY_TEST_BINARY names a kproxy built elsewhere to test instead (an
// earlier build, to show a test fails there).
func Build(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("KPROXY_TEST_BINARY"); bin != "" {
		t.Logf("testing %s ($KPROXY_TEST_BINARY)", bin)
		return bin
	}
	bin := filepath.Join(t.TempDir(), "kproxy")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, kproxyPackage).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", kproxyPackage, err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}
