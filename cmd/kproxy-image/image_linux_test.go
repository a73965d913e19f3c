package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

// testVersion is the version the test's image is built with: its tag, its
// label, and what kproxy version prints from the unpacked root.
const testVersion = "image-test"

// manifest is one Service (a documentation-range cluster IP) with one
// endpoint, for kproxy run --source file: inside the image's root.
const manifest = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
- addresses: ["192.0.2.10"]
  conditions: {ready: true}
`

// The image, built as make image builds it, checked with the standard OCI
// tools: skopeo reads the archive's config, umoci unpacks it, and the
// unpacked root runs kproxy and its nft, programming nftables in a network
// namespace.
func TestImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chroot, network namespaces); run as root")
	}
	for _, tool := range []string{"skopeo", "umoci", "nft", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make test-deps installs skopeo and umoci from Debian's packages)", tool)
		}
	}
	dir := t.TempDir()
	archive := buildImage(t, dir)

	// skopeo: the archive's config names the entrypoint, the platform, the version.
	out := run(t, "skopeo", "inspect", "--config", "oci-archive:"+archive+":"+testVersion)
	var cf struct {
		Architecture, OS string
		Config           struct {
			Entrypoint []string
			Labels     map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &cf); err != nil {
		t.Fatalf("skopeo inspect --config: %v\n%s", err, out)
	}
	if cf.Architecture != "amd64" || cf.OS != "linux" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != entrypoint {
		t.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, entrypoint)
	}
	if v := cf.Config.Labels["org.opencontainers.image.version"]; v != testVersion {
		t.Errorf("version label %q, want %q", v, testVersion)
	}

	// umoci unpacks an OCI layout directory: the archive's content.
	layoutDir := filepath.Join(dir, "layout")
	if err := os.Mkdir(layoutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "tar", "-xf", archive, "-C", layoutDir)
	bundle := filepath.Join(dir, "bundle")
	run(t, "umoci", "unpack", "--image", layoutDir+":"+testVersion, bundle)
	rootfs := filepath.Join(bundle, "rootfs")

	if out := run(t, "chroot", rootfs, entrypoint, "version"); !strings.Contains(out, testVersion) {
		t.Errorf("kproxy version in the image printed %q, want %s", out, testVersion)
	}
	for _, tool := range []string{"nft", "iptables-save", "ip6tables-restore"} {
		run(t, "chroot", rootfs, tool, "--version")
	}

	// kproxy from the image programs nftables in a namespace, with the
	// image's nft; kproxy cleanup removes its table. /dev and /proc as a
	// container runtime gives them (nft opens /dev/null).
	mountRuntime(t, rootfs)
	ns := netnstest.New(t, "image")
	ns.MustRun(t, "chroot", rootfs, "nft", "list", "ruleset")

	// The DaemonSet's init container (deploy/daemonset.yaml): kproxy
	// setup-node from the image sets the hand-over's sysctl in the node's
	// network namespace, which starts at 0 (before kproxy run sets it).
	const migrateReq = "/proc/sys/net/ipv4/tcp_migrate_req"
	if before, err := ns.Run("cat", migrateReq); err != nil {
		t.Logf("kernel without net.ipv4.tcp_migrate_req (Linux 5.14+), setup-node not checked: %v", err)
	} else if strings.TrimSpace(before) != "0" {
		t.Errorf("a new network namespace has tcp_migrate_req %s, want 0", strings.TrimSpace(before))
	} else {
		ns.MustRun(t, "chroot", rootfs, entrypoint, "setup-node")
		if after := strings.TrimSpace(ns.MustRun(t, "cat", migrateReq)); after != "1" {
			t.Errorf("after the image's kproxy setup-node, tcp_migrate_req is %s, want 1", after)
		}
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc/kproxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/kproxy/services.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := ns.Command(context.Background(), "chroot", rootfs, entrypoint, "run", "--portal", "nftables",
		"--source", "file:/etc/kproxy/services.yaml", "--node-name", "node", "--admin-token-file", "/tmp/admin-token")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kproxy in the image: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	var table string
	for deadline := time.Now().Add(30 * time.Second); ; {
		table, _ = ns.Run("chroot", rootfs, "nft", "list", "table", "inet", "kproxy")
		if strings.Contains(table, "198.18.0.10") {
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("kproxy in the image exited (%v) before programming nftables:\n%s", err, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("table inet kproxy has no rule for 198.18.0.10 after 30s:\n%s\nkproxy's log:\n%s", table, logs.String())
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("kproxy exited after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("kproxy did not exit within 15s of SIGTERM:\n%s", logs.String())
	}
	ns.MustRun(t, "chroot", rootfs, entrypoint, "cleanup", "--portal", "nftables")
	if out, err := ns.Run("chroot", rootfs, "nft", "list", "table", "inet", "kproxy"); err == nil {
		t.Errorf("table inet kproxy left after kproxy cleanup:\n%s", out)
	}
}

// buildImage builds the image into dir as make image does (static kproxy,
// staged tools, the builder) and returns the archive's path. kproxy's
// build is cached by Go's build cache after the first run.
func buildImage(t *testing.T, dir string) string {
	t.Helper()
	start := time.Now()
	bin := filepath.Join(dir, "kproxy")
	gobuild := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+testVersion, "-o", bin, "github.com/kproxy/kproxy/cmd/kproxy")
	gobuild.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("build static kproxy: %v\n%s", err, out)
	}
	tools := filepath.Join(dir, "tools")
	run(t, "./stage-tools.sh", tools)
	archive := filepath.Join(dir, "kproxy-image.oci.tar")
	if err := build(tools, bin, testVersion, archive); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s (%d bytes) in %v", archive, fi.Size(), time.Since(start).Round(time.Millisecond))
	return archive
}

// mountRuntime mounts the host's /dev and a /proc into rootfs, as a
// container runtime would, until the test ends.
func mountRuntime(t *testing.T, rootfs string) {
	t.Helper()
	dev, proc := filepath.Join(rootfs, "dev"), filepath.Join(rootfs, "proc")
	if err := syscall.Mount("/dev", dev, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		t.Fatalf("bind /dev into the image's root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dev, syscall.MNT_DETACH) })
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		t.Fatalf("mount /proc in the image's root: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(proc, syscall.MNT_DETACH) })
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
