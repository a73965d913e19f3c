//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kproxy/kproxy/portal/netnstest"
)

// TestE2ENetns runs the kproxy binary in a node namespace with nftables and
// with iptables portals (in parallel, in separate topologies), and checks
// each mode's UDP conntrack clearing in a topology of its own.
func TestE2ENetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("end-to-end portal tests need root (network namespaces, nftables, iptables)")
	}
	netnstest.New(t, "probe") // skips when the kernel refuses namespaces, before the build
	bin := buildKproxy(t)
	t.Run("Nftables", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testNftables(t, bin)
	})
	t.Run("NftablesUDPConntrack", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testUDPConntrack(t, bin, "nftables")
	})
	t.Run("NftablesHealth", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testHealth(t, bin)
	})
	t.Run("NftablesHeadlessNamedProxier", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testHeadlessNamedProxier(t, bin)
	})
	t.Run("KPNGExampleAllIP", func(t *testing.T) {
		t.Parallel()
		need(t, "nft", "jq")
		testKPNGExample(t, bin)
	})
	t.Run("NftablesVanishedClient", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testVanishedClient(t, bin)
	})
	t.Run("IPTablesWithoutIP6tables", func(t *testing.T) {
		t.Parallel()
		need(t, "iptables-restore", "iptables-save", "ip6tables-save")
		testIPTablesWithoutIP6tables(t, bin)
	})
	t.Run("NftablesAffinityPerScope", func(t *testing.T) {
		t.Parallel()
		need(t, "nft")
		testAffinityPerScope(t, bin)
	})
	t.Run("IPTablesUDPConntrack", func(t *testing.T) {
		t.Parallel()
		need(t, "iptables-restore", "iptables-save")
		testUDPConntrack(t, bin, "iptables")
	})
	t.Run("IPTables", func(t *testing.T) {
		t.Parallel()
		need(t, "iptables-restore", "iptables-save")
		testIPTables(t, bin)
	})
}

func need(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not installed (apt-get install -y nftables iptables): %v", name, err)
		}
	}
}

// kproxyPackage is what buildKproxy builds: by import path, so the build
// finds the module from the test's directory, wherever that is.
const kproxyPackage = "github.com/kproxy/kproxy/cmd/kproxy"

// buildKproxy builds the binary once for the whole test into the test's
// temporary directory (never into the source tree).
func buildKproxy(t *testing.T) string {
	t.Helper()
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
