//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"testing"

	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

// TestE2ENetns runs the kproxy binary in network namespaces: each
// scenario in a topology of its own, in parallel.
func TestE2ENetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("end-to-end portal tests need root (network namespaces, nftables, iptables)")
	}
	netnstest.New(t, "probe") // skips when the kernel refuses namespaces, before the build
	bin := binarytest.Build(t)
	nft, ipt := []string{"nft"}, []string{"iptables-restore", "iptables-save"}
	for _, sc := range []struct {
		name  string
		needs []string
		run   func(t *testing.T, bin string)
	}{
		{"Nftables", nft, testNftables},
		{"NftablesUDPConntrack", nft, func(t *testing.T, bin string) { testUDPConntrack(t, bin, "nftables") }},
		{"NftablesHealth", nft, testHealth},
		{"NftablesHeadlessNamedProxier", nft, testHeadlessNamedProxier},
		{"KPNGExampleAllIP", []string{"nft", "jq"}, testKPNGExample},
		{"NftablesVanishedClient", nft, testVanishedClient},
		{"NftablesAffinityPerScope", nft, testAffinityPerScope},
		{"NftablesHandover", nft, func(t *testing.T, bin string) { testHandover(t, bin) }},
		{"NftablesProbeHandover", nft, testProbeHandover},
		{"NftablesKillWithKeeper", nft, func(t *testing.T, bin string) { testKillWithKeeper(t, bin, true) }},
		{"NftablesKillWithKeeperGoroutines", nft, func(t *testing.T, bin string) { testKillWithKeeper(t, bin, false) }},
		{"NftablesHealthHandover", nft, testHealthHandover},
		{"NftablesHealthPortRetry", nft, testHealthPortRetry},
		{"AutoPortal", append(ipt, "nft", "setpriv"), testAutoPortal},
		{"NftablesNoHijack", nft, func(t *testing.T, bin string) { testNoHijack(t, bin, "nftables") }},
		{"NftablesAcceptQueue", nft, testAcceptQueue},
		{"NftablesEphemeralPorts", nft, testEphemeralPorts},
		{"NftablesProxyProtocol", nft, func(t *testing.T, bin string) { testProxyProtocol(t, bin, "nftables") }},
		{"NftablesTransparent", nft, func(t *testing.T, bin string) { testTransparent(t, bin, "nftables") }},
		{"IPTablesTransparent", ipt, func(t *testing.T, bin string) { testTransparent(t, bin, "iptables") }},
		{"NftablesPodSourceAcrossNodes", nft, func(t *testing.T, bin string) { testPodSourceAcrossNodes(t, bin, "nftables", true) }},
		{"NftablesPodSourceAcrossNodesGoroutines", nft, func(t *testing.T, bin string) { testPodSourceAcrossNodes(t, bin, "nftables", false) }},
		{"NftablesTimeWaitReuse", nft, func(t *testing.T, bin string) { testTimeWaitReuse(t, bin, "nftables") }},
		{"IPTablesTimeWaitReuse", ipt, func(t *testing.T, bin string) { testTimeWaitReuse(t, bin, "iptables") }},
		{"IPTablesPodSourceAcrossNodes", ipt, func(t *testing.T, bin string) { testPodSourceAcrossNodes(t, bin, "iptables", true) }},
		{"NftablesPodSourceSameBridge", nft, func(t *testing.T, bin string) { testPodSourceSameBridge(t, bin, "nftables", true) }},
		{"NftablesPodSourceSameBridgeGoroutines", nft, func(t *testing.T, bin string) { testPodSourceSameBridge(t, bin, "nftables", false) }},
		{"IPTablesPodSourceSameBridge", ipt, func(t *testing.T, bin string) { testPodSourceSameBridge(t, bin, "iptables", true) }},
		{"NftablesTrafficPolicy", nft, func(t *testing.T, bin string) { testTrafficPolicy(t, bin, "nftables") }},
		{"IPTables", ipt, testIPTables},
		{"IPTablesTrafficPolicy", ipt, func(t *testing.T, bin string) { testTrafficPolicy(t, bin, "iptables") }},
		{"IPTablesNoHijack", ipt, func(t *testing.T, bin string) { testNoHijack(t, bin, "iptables") }},
		{"IPTablesProxyProtocol", ipt, func(t *testing.T, bin string) { testProxyProtocol(t, bin, "iptables") }},
		{"IPTablesUDPConntrack", ipt, func(t *testing.T, bin string) { testUDPConntrack(t, bin, "iptables") }},
		{"IPTablesWithoutIP6tables", append(ipt, "ip6tables-save"), testIPTablesWithoutIP6tables},
		{"LeastPrivilegeNftables", append(nft, "setpriv"), func(t *testing.T, bin string) { testLeastPrivilege(t, bin, "nftables") }},
		{"LeastPrivilegeIPTables", append(ipt, "setpriv"), func(t *testing.T, bin string) { testLeastPrivilege(t, bin, "iptables") }},
		{"LeastPrivilegeUDPConntrack", append(nft, "setpriv"), func(t *testing.T, bin string) { testUDPConntrack(t, bin, "nftables", onlyNetAdmin...) }},
		{"LeastPrivilegeHandover", append(nft, "setpriv"), func(t *testing.T, bin string) { testHandover(t, bin, onlyNetAdmin...) }},
		{"SetupNodeSysctl", []string{"unshare", "sh"}, testSetupNode},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			need(t, sc.needs...)
			sc.run(t, bin)
		})
	}
}

func need(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not installed (apt-get install -y nftables iptables): %v", name, err)
		}
	}
}
