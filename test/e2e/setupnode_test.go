//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kproxy/kproxy/test/netnstest"
)

const migrateReq = "/proc/sys/net/ipv4/tcp_migrate_req"

const closeWait = "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait"

// testSetupNode runs deploy/daemonset.yaml's init container command (its
// image's kproxy replaced by the binary under test, its config
// deploy/configmap.yaml's) in a new network namespace, which starts with
// net.ipv4.tcp_migrate_req=0 and the kernel's conntrack timeouts: it sets
// tcp_migrate_req to 1 there, and CLOSE_WAIT's timeout to kube-proxy's
// hour. With /proc/sys read-only, as every container that is not
// privileged has it, the same command fails and names the setting.
func testSetupNode(t *testing.T, bin string) {
	argv := initCommand(t)
	if argv[0] != "kproxy" {
		t.Fatalf("deploy/daemonset.yaml: init container runs %q, want the image's kproxy", argv)
	}
	argv[0] = bin
	if i := slices.Index(argv, "--config"); i > 0 && i+1 < len(argv) {
		argv[i+1] = deployConfig(t)
	}
	ns := netnstest.New(t, "node")
	read := func() string {
		out, err := ns.Run("cat", migrateReq)
		if err != nil {
			t.Skipf("kernel without net.ipv4.tcp_migrate_req (Linux 5.14+): %v", err)
		}
		return strings.TrimSpace(out)
	}
	if v := read(); v != "0" {
		t.Fatalf("a new network namespace has tcp_migrate_req %s, want 0 (the test could not see a change)", v)
	}
	if v, err := ns.Run("cat", closeWait); err != nil || strings.TrimSpace(v) == "3600" {
		t.Fatalf("a new network namespace has %s %q (%v), want the kernel's default (the test could not see a change)", closeWait, v, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Unprivileged: a read-only /proc/sys in a mount namespace of its own.
	ro := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec ip netns exec "$@"`, "sh", ns.Name}, argv...)...)
	out, err := ro.CombinedOutput()
	if err == nil || !strings.Contains(string(out), migrateReq) || !strings.Contains(string(out), "read-only file system") {
		t.Errorf("with /proc/sys read-only: %v, output %q; want a failure naming %s, read-only", err, out, migrateReq)
	}
	if v := read(); v != "0" {
		t.Fatalf("after the read-only run: tcp_migrate_req %s, want 0", v)
	}

	// Privileged: /proc/sys writable.
	out, err = ns.Command(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if v := read(); v != "1" {
		t.Errorf("after %s: tcp_migrate_req %s, want 1 (output %q)", strings.Join(argv, " "), v, out)
	}
	if v, err := ns.Run("cat", closeWait); err != nil || strings.TrimSpace(v) != "3600" {
		t.Errorf("after %s: %s %q (%v), want kube-proxy's 3600 (output %q)", strings.Join(argv, " "), closeWait, v, err, out)
	}
}

// deployConfig writes deploy/configmap.yaml's config.conf to a file and
// returns its path.
func deployConfig(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatalf("deploy/configmap.yaml: %v", err)
	}
	path := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(path, []byte(cm.Data["config.conf"]), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// initCommand is the command and arguments of the Linux DaemonSet's init
// container.
func initCommand(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(raw, &ds); err != nil {
		t.Fatalf("deploy/daemonset.yaml: %v", err)
	}
	var inits []corev1.Container
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		if c.RestartPolicy == nil { // not a sidecar (the socket keeper)
			inits = append(inits, c)
		}
	}
	if len(inits) != 1 {
		t.Fatalf("deploy/daemonset.yaml: %d init containers that run to completion, want 1 (the sysctl step)", len(inits))
	}
	return slices.Concat(inits[0].Command, inits[0].Args)
}
