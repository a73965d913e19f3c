package deploy_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/kubetest"
)

// The binaries `make test` builds for the rollout test, and exports.
const (
	// envControlPlane: test/k8s/cmd/kube-control-plane, upstream's
	// kube-scheduler and kube-controller-manager of the API server's
	// version (test/build-control-plane.sh).
	envControlPlane = "KPROXY_CONTROL_PLANE"
	// envKwok: sigs.k8s.io/kwok's controller (test/build-kwok.sh).
	envKwok = "KPROXY_KWOK"
)

// binaryFromEnv is the file $name names. Unset, the test skips: only
// `make test` (or the build scripts, which print the paths) provides them,
// and a plain `go test ./deploy/` should still run the other tests. Set but
// not a file is a failure: the build was meant to be there.
func binaryFromEnv(t *testing.T, name, script string) string {
	t.Helper()
	bin := os.Getenv(name)
	if bin == "" {
		t.Skipf("$%s is not set: `make test` builds it (or %s, which prints its path)", name, script)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("$%s=%s: not a file (%v): run `make test`, which builds it (%s)", name, bin, err, script)
	}
	return bin
}

// controlPlane is a kube-scheduler, a kube-controller-manager running only
// the DaemonSet controller, and kwok playing the kubelet of every node
// annotated kwok.x-k8s.io/node=fake, all against s as its admin.
type controlPlane struct {
	procs []*component
}

type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

func startControlPlane(t *testing.T, s *kubetest.Server, controlPlaneBin, kwokBin string) *controlPlane {
	t.Helper()
	dir := t.TempDir()
	stages, err := filepath.Abs(filepath.Join("testdata", "kwok-stages.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{}
	t.Cleanup(func() { cp.stop(t) })
	// No serving port for either (--secure-port=0): nothing here needs
	// their health or metrics, and parallel tests need no free ports.
	cp.start(t, dir, "kube-scheduler", controlPlaneBin, "kube-scheduler",
		"--kubeconfig="+s.AdminKubeconfig, "--leader-elect=false", "--secure-port=0")
	cp.start(t, dir, "kube-controller-manager", controlPlaneBin, "kube-controller-manager",
		"--kubeconfig="+s.AdminKubeconfig, "--leader-elect=false", "--secure-port=0",
		// The DaemonSet controller alone: it creates, surges and deletes the
		// pods and records ControllerRevisions. It acts with the admin's
		// credentials (no per-controller service accounts, so no token
		// controller or signing key is needed).
		"--controllers=daemonset", "--use-service-account-credentials=false")
	cp.start(t, dir, "kwok", kwokBin,
		"--kubeconfig="+s.AdminKubeconfig, "--config="+stages,
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		// Addresses it writes into Node and Pod status only; nothing
		// connects to them. Documentation ranges.
		"--node-ip=192.0.2.1", "--cidr=198.51.100.0/24",
		"--server-address=")
	return cp
}

func (cp *controlPlane) start(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	c := &component{name: name, logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	log, err := os.Create(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread for the child's lifetime, so a
		// test binary killed by -timeout leaves no component behind.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.err = c.cmd.Wait()
		log.Close()
		close(c.done)
	}()
	if err := <-started; err != nil {
		log.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	cp.procs = append(cp.procs, c)
}

// exited names a component that has exited (none should while the test
// runs), with its error, or "".
func (cp *controlPlane) exited() string {
	for _, c := range cp.procs {
		select {
		case <-c.done:
			return c.name + " exited: " + errString(c.err)
		default:
		}
	}
	return ""
}

func errString(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// stop stops every component (SIGTERM, then SIGKILL after 5 s) and, if the
// test failed, prints each one's last log lines.
func (cp *controlPlane) stop(t *testing.T) {
	for _, c := range cp.procs {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range cp.procs {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("%s: last lines of %s:\n%s", c.name, c.logPath, tail(c.logPath, 40))
		}
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every 100 ms until it holds, a component exits or the
// deadline passes; it returns cond's last description of what it waits for.
func (cp *controlPlane) waitFor(ctx context.Context, cond func() (bool, string)) (bool, string) {
	for {
		ok, why := cond()
		if ok {
			return true, why
		}
		if e := cp.exited(); e != "" {
			return false, e + "; " + why
		}
		select {
		case <-ctx.Done():
			return false, why
		case <-time.After(100 * time.Millisecond):
		}
	}
}
