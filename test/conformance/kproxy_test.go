//go:build linux

package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/binarytest"
)

// supportedFlags is which of names `kproxy run` knows: the suite passes
// kube-proxy's flags where the binary has them, and a binary without one
// fails the flows that need it rather than the whole run.
func supportedFlags(t *testing.T, bin string, names ...string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	ok := map[string]bool{}
	for _, n := range names {
		ok[n] = strings.Contains(string(out), "  -"+n+" ")
	}
	return ok
}

// instance is one kproxy run in a topology's node.
type instance struct {
	*binarytest.Proc
	tokenFile string
	manifest  string
	tp        *topology
	mode      string
}

func startKproxy(t *testing.T, bin, mode string, tp *topology, manifestText string, flags []string) *instance {
	t.Helper()
	dir := t.TempDir()
	in := &instance{tokenFile: filepath.Join(dir, "admin-token"), manifest: filepath.Join(dir, "services.yaml"), tp: tp, mode: mode}
	in.writeManifest(t, manifestText)
	args := append([]string{"run", "--portal", mode, "--source", "file:" + in.manifest, "--node-name", nodeName,
		"--log-format", "json", "--enable-fault-injection", "--admin-address", binarytest.AdminAddress, "--admin-token-file", in.tokenFile,
		"--file-poll-interval", "100ms", "--proxy-ports-file", filepath.Join(dir, "proxy-ports.json"),
		"--shutdown-grace-period", "1s"}, flags...)
	in.Proc = binarytest.Start(t, tp.node.Command(context.Background(), bin, args...), filepath.Join(dir, "kproxy.log"))
	t.Logf("started kproxy (pid %d): %s", in.Cmd.Process.Pid, strings.Join(args, " "))
	return in
}

// writeManifest replaces the manifest atomically (kproxy polls the file).
func (in *instance) writeManifest(t *testing.T, text string) {
	t.Helper()
	tmp := in.manifest + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, in.manifest); err != nil {
		t.Fatal(err)
	}
}

func (in *instance) exited() error {
	select {
	case <-in.Done():
		return fmt.Errorf("kproxy exited (%v); end of its log:\n%s", in.Err(), binarytest.Tail(in.Log, 15))
	default:
		return nil
	}
}

// servicePort is what GET /state says of one service port.
type servicePort struct {
	ListenAddresses []string          `json:"listenAddresses"`
	ProxyPort       int               `json:"proxyPort"`
	Endpoints       []json.RawMessage `json:"endpoints"`
	Deleted         bool              `json:"deleted"`
}

// state asks the admin API, from inside the node, for the live service
// ports.
func (in *instance) state() ([]servicePort, error) {
	sps, err := binarytest.State[servicePort](in.tp.node.HTTPClient(2*time.Second), binarytest.AdminAddress, in.tokenFile)
	if err != nil {
		return nil, err
	}
	var live []servicePort
	for _, sp := range sps {
		if !sp.Deleted {
			live = append(live, sp)
		}
	}
	return live, nil
}

// rules dumps the node's kernel rules of the instance's portal.
func (in *instance) rules() string {
	if in.mode == "nftables" {
		out, _ := in.tp.node.Run("nft", "list", "ruleset")
		return out
	}
	out, _ := in.tp.node.Run("iptables-save")
	out6, _ := in.tp.node.Run("ip6tables-save")
	return out + out6
}

// awaitReady polls (every 50 ms, at most 10 s) until kproxy serves the
// manifest: its service ports open and its cluster IPs in the rules; with
// noEndpoints, until every service port has none. It returns why not, so
// the flows still run and say what they see.
func (in *instance) awaitReady(m *manifest, noEndpoints bool) error {
	deadline := time.Now().Add(10 * time.Second)
	var why string
	for {
		if err := in.exited(); err != nil {
			return err
		}
		why = in.notReady(m, noEndpoints)
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within 10s: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (in *instance) notReady(m *manifest, noEndpoints bool) string {
	st, err := in.state()
	if err != nil {
		return err.Error()
	}
	open := 0
	for _, sp := range st {
		if sp.ProxyPort != 0 && len(sp.ListenAddresses) > 0 {
			open++
		}
		if noEndpoints && len(sp.Endpoints) > 0 {
			return "a service port still has endpoints"
		}
	}
	if open < m.servicePorts {
		return fmt.Sprintf("%d of %d service ports open", open, m.servicePorts)
	}
	rules := in.rules()
	for _, ip := range m.clusterIPs {
		if !strings.Contains(rules, ip.String()) {
			return fmt.Sprintf("cluster IP %s not in the %s rules", ip, in.mode)
		}
	}
	return ""
}
