//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

// testHandover restarts kproxy 10 times under load in nftables mode, each
// time starting the new process beside the old one (as a DaemonSet
// rolling update with maxSurge does) and then sending the old one
// SIGTERM: no connection-per-request client fails, and keep-alive
// connections opened before the first restart keep working through all of
// them (the old processes drain them). Then a stop and a start, after
// SIGTERM and after SIGKILL: the gap is measured, and the new process
// takes the same proxy ports.
func testHandover(t *testing.T, bin string, wrap ...string) {
	e := newEnv(t, bin, "nftables")
	e.wrap = wrap
	e.writeManifest(t, false)
	// Two admin addresses, since the overlapping processes' admin APIs
	// cannot share one (10261 is the live view's, which they share).
	addrs := []string{"127.0.0.1:10260", "127.0.0.1:10262"}
	e.adminAt = addrs[0]
	// A grace period longer than the test: every old process keeps its
	// keep-alive connections until the clients close them.
	grace := []string{"--shutdown-grace-period", "60s"}
	old := e.start(t, grace...)
	first := e.waitReady(t, old, servicePorts(false))
	e.waitRules(t, []string{webCluster4}, nil)
	svc := svcAddr(webCluster4, webTCP)

	// A successor takes the ports its predecessor recorded (within 100 ms
	// of a change); one started before that allocates new ones.
	e.waitProxyPortsRecorded(t, first[spWebTCP].ProxyPort)
	load := e.startLoad(t, svc, 4, 4)
	var draining []*proc
	for i := 1; i <= 10; i++ {
		e.adminAt = addrs[i%2]
		next := e.start(t, grace...)
		st := e.waitReady(t, next, servicePorts(false))
		if st[spWebTCP].ProxyPort != first[spWebTCP].ProxyPort {
			t.Fatalf("restart %d: proxy port %d, want the previous process's %d", i, st[spWebTCP].ProxyPort, first[spWebTCP].ProxyPort)
		}
		load.waitProgress(t)
		// The old one closes its listeners (queued connections migrate to
		// the new one's) and drains its established connections.
		if err := old.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		draining = append(draining, old)
		waitLogged(t, old, "kernel portal rules left in place") // its listeners are closed
		load.waitProgress(t)
		old = next
	}
	endOverlappingRestarts(t, "nftables portal", load, draining)

	// Stop then start, after SIGTERM and after kill -9: the rules stay,
	// the new process takes the same proxy port; the gap is how long
	// clients were refused.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		signalled := time.Now()
		old.stop(t, sig)
		e.adminAt = addrs[0]
		next := e.start(t)
		gap := serviceGap(t, signalled, sig, func() error {
			_, err := e.askBackend(e.tp.Client, "tcp", svc, time.Second)
			return err
		})
		st := e.waitReady(t, next, servicePorts(false))
		t.Logf("%v then start: service back after %v, proxy port %d (was %d)", sig, gap.Round(time.Millisecond), st[spWebTCP].ProxyPort, first[spWebTCP].ProxyPort)
		if st[spWebTCP].ProxyPort != first[spWebTCP].ProxyPort {
			t.Errorf("after %v the new process took proxy port %d, want the old one's %d", sig, st[spWebTCP].ProxyPort, first[spWebTCP].ProxyPort)
		}
		old = next
	}
}

// endOverlappingRestarts stops the load, waits for the old processes to
// drain, and fails on any request that failed across the restarts.
func endOverlappingRestarts(t *testing.T, what string, load *handoverLoad, draining []*proc) {
	t.Helper()
	ok, failed, kaOK, kaFailed := load.stop(t)
	waitDrained(t, draining)
	t.Logf("%s, 10 overlapping restarts: %d requests, %d failed; keep-alive: %d exchanges, %d failed", what, ok, failed, kaOK, kaFailed)
	if failed > 0 || kaFailed > 0 {
		t.Errorf("%d of %d connection-per-request requests and %d keep-alive exchanges failed across overlapping restarts, want 0",
			failed, ok+failed, kaFailed)
	}
}

// waitDrained waits until each draining process exits (the clients have
// closed: nothing is left to drain) and checks it exited 0.
func waitDrained(t *testing.T, draining []*proc) {
	t.Helper()
	for _, p := range draining {
		select {
		case <-p.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("a draining kproxy did not exit within 15 s of its last connection closing")
		}
		if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("a drained kproxy exited with %d, want 0", code)
		}
	}
}

// serviceGap polls ask, as a client would retry, until it succeeds, and
// returns how long after signalled that was (at most 15 s, else the test
// fails): the gap in service of a stop then start after sig.
func serviceGap(t *testing.T, signalled time.Time, sig syscall.Signal, ask func() error) time.Duration {
	t.Helper()
	for deadline := signalled.Add(15 * time.Second); time.Now().Before(deadline); {
		if ask() == nil {
			return time.Since(signalled)
		}
		time.Sleep(5 * time.Millisecond) // measuring the gap: poll as a client would retry
	}
	t.Fatalf("service did not come back within 15 s of %v and a new start", sig)
	return 0
}

// handoverLoad is connection-per-request clients and keep-alive
// connections against one service address, from the client namespace.
type handoverLoad struct {
	stopping       chan struct{}
	wg             sync.WaitGroup
	ok, failed     atomic.Int64
	kaOK, kaFailed atomic.Int64
	firstErr       atomic.Value
	firstKAErr     atomic.Value
}

// startLoad starts perRequest connection-per-request clients and
// keepAlive keep-alive connections; each loop stops by itself after 90 s
// or 200,000 requests.
func (e *env) startLoad(t *testing.T, svc netip.AddrPort, perRequest, keepAlive int) *handoverLoad {
	ask := func() error {
		_, err := e.askBackend(e.tp.Client, "tcp", svc, 5*time.Second)
		return err
	}
	return startHandoverLoad(t, e.tp.Client.DialContext, svc.String(), ask, perRequest, keepAlive)
}

// startHandoverLoad is startLoad with the dialer and the request given.
func startHandoverLoad(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), svc string, ask func() error, perRequest, keepAlive int) *handoverLoad {
	l := &handoverLoad{stopping: make(chan struct{})}
	limit := time.Now().Add(90 * time.Second)
	for range perRequest {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; n < 200_000 && time.Now().Before(limit); n++ {
				select {
				case <-l.stopping:
					return
				default:
				}
				if err := ask(); err != nil {
					l.failed.Add(1)
					l.firstErr.CompareAndSwap(nil, time.Now().Format("15:04:05.000 ")+err.Error())
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	for range keepAlive {
		c, err := dial(context.Background(), "tcp", svc)
		if err != nil {
			t.Fatalf("keep-alive connection: %v", err)
		}
		r := bufio.NewReader(c)
		if _, err := backends.ReadName(r); err != nil {
			t.Fatalf("keep-alive connection: %v", err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			buf := make([]byte, 5)
			for n := 0; n < 200_000 && time.Now().Before(limit); n++ {
				select {
				case <-l.stopping:
					return
				case <-time.After(10 * time.Millisecond):
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := fmt.Fprintf(c, "ping%d", n%10); err != nil {
					l.kaFailed.Add(1)
					l.firstKAErr.CompareAndSwap(nil, "keep-alive write: "+err.Error())
					return
				}
				if _, err := io.ReadFull(r, buf); err != nil || string(buf) != fmt.Sprintf("ping%d", n%10) {
					l.kaFailed.Add(1)
					l.firstKAErr.CompareAndSwap(nil, fmt.Sprintf("keep-alive read: %q %v", buf, err))
					return
				}
				l.kaOK.Add(1)
			}
		}()
	}
	return l
}

// waitProgress waits until 20 more requests succeeded (load flows).
func (l *handoverLoad) waitProgress(t *testing.T) {
	t.Helper()
	target := l.ok.Load() + 20
	deadline := time.Now().Add(15 * time.Second)
	for l.ok.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("load made no progress in 15 s (%d ok, %d failed, first error %v)", l.ok.Load(), l.failed.Load(), l.firstErr.Load())
		}
		time.Sleep(10 * time.Millisecond) // counters, not events
	}
}

func (l *handoverLoad) stop(t *testing.T) (ok, failed, kaOK, kaFailed int64) {
	close(l.stopping)
	l.wg.Wait()
	if err := l.firstErr.Load(); err != nil {
		t.Logf("first connection-per-request error: %v", err)
	}
	if err := l.firstKAErr.Load(); err != nil {
		t.Logf("first keep-alive error: %v", err)
	}
	return l.ok.Load(), l.failed.Load(), l.kaOK.Load(), l.kaFailed.Load()
}

// waitLogged waits until p's log holds msg (or p exits).
func waitLogged(t *testing.T, p *proc, msg string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, _ := os.ReadFile(p.Log); strings.Contains(string(b), msg) {
			return
		}
		select {
		case <-p.Done():
			if b, _ := os.ReadFile(p.Log); strings.Contains(string(b), msg) {
				return
			}
			t.Fatalf("kproxy exited before logging %q:\n%s", msg, binarytest.Tail(p.Log, 20))
		case <-time.After(20 * time.Millisecond): // a log file: nothing to await
		}
		if time.Now().After(deadline) {
			t.Fatalf("kproxy did not log %q within 15 s", msg)
		}
	}
}

// waitProxyPortsRecorded waits until the proxy ports file lists port.
func (e *env) waitProxyPortsRecorded(t *testing.T, port int) {
	t.Helper()
	path := filepath.Join(e.dir, "proxy-ports.json")
	want := fmt.Sprintf(`"proxy":%d`, port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not list proxy port %d", path, port)
		}
		time.Sleep(20 * time.Millisecond) // polling a file: no event to wait for
	}
}

// testProbeHandover hands over as a DaemonSet rolling with surge does: the
// new process is started beside the old one, and the old one is sent
// SIGTERM the moment the new pod's readiness probe first succeeds (the
// probe deploy/daemonset.yaml runs, kproxy check-ready on the new process's
// --ready-file, here every 10 ms where the kubelet probes every 2 s), not
// once the test has seen the new process serve. 10 restarts under load:
// no connection-per-request client fails, TCP or UDP (a datagram from a
// new socket each, as DNS queries), and the keep-alive connections live
// on. The new process shares the old one's sockets: a datagram queued
// on the old one's, or whose reply was on its way, is not lost when the
// old one goes. A probe that is ready before the new process listens (as
// kube-proxy's /healthz is from the start) lets the old one close its
// sockets while nothing else takes the connections.
func testProbeHandover(t *testing.T, bin string) {
	e := newEnv(t, bin, "nftables")
	e.writeManifest(t, false)
	addrs := []string{"127.0.0.1:10260", "127.0.0.1:10262"}
	e.adminAt = addrs[0]
	readyFile := func(i int) string { return filepath.Join(e.dir, fmt.Sprintf("pod-%d", i), "ready") }
	args := func(i int) []string { return []string{"--shutdown-grace-period", "60s", "--ready-file", readyFile(i)} }
	old := e.start(t, args(0)...)
	first := e.waitReady(t, old, servicePorts(false))
	e.waitRules(t, []string{webCluster4}, nil)
	waitProbeReady(t, bin, readyFile(0))
	e.waitProxyPortsRecorded(t, first[spWebTCP].ProxyPort)
	load := e.startLoad(t, svcAddr(webCluster4, webTCP), 4, 4)
	// UDP too: a request a datagram from a new socket, as DNS queries.
	udpSvc := svcAddr(webCluster4, webUDP)
	udpLoad := startHandoverLoad(t, nil, udpSvc.String(), func() error {
		_, err := e.askBackend(e.tp.Client, "udp", udpSvc, 5*time.Second)
		return err
	}, 4, 0)
	var draining []*proc
	for i := 1; i <= 10; i++ {
		e.adminAt = addrs[i%2]
		load.waitProgress(t)
		udpLoad.waitProgress(t)
		next := e.start(t, args(i)...)
		waitProbeReady(t, bin, readyFile(i))
		// It took the sockets the old one serves: one accept queue and
		// one datagram queue, whoever closes first.
		waitLogged(t, next, "sharing the listening sockets of the process serving beside this one")
		if err := old.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		draining = append(draining, old)
		waitLogged(t, old, "kernel portal rules left in place") // its listeners are closed
		if _, err := os.Stat(readyFile(i - 1)); err == nil {
			t.Errorf("restart %d: the draining process's ready file is still there", i)
		}
		old = next
	}
	load.waitProgress(t)
	udpLoad.waitProgress(t)
	udpOK, udpFailed, _, _ := udpLoad.stop(t)
	t.Logf("UDP across the same restarts: %d requests, %d failed", udpOK, udpFailed)
	if udpFailed > 0 {
		t.Errorf("%d of %d UDP requests failed across overlapping restarts, want 0", udpFailed, udpOK+udpFailed)
	}
	endOverlappingRestarts(t, "nftables portal, handed over on the readiness probe", load, draining)
}

// waitProbeReady runs the DaemonSet's readiness probe until it succeeds.
func waitProbeReady(t *testing.T, bin, file string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if exec.Command(bin, "check-ready", "--ready-file", file).Run() == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kproxy check-ready --ready-file %s did not succeed within 15 s", file)
		}
		time.Sleep(10 * time.Millisecond) // the probe is polled, as the kubelet polls it
	}
}

// testKillWithKeeper kills kproxy with SIGKILL (as the OOM killer does), or
// stops it with SIGTERM and no successor (its container restarted), and
// starts the next one, 6 times under load, with the socket keeper beside
// it (deploy/daemonset.yaml's sidecar). The listening sockets outlive the
// killed process in the keeper, and connections queue in their backlogs;
// the established connections outlive it there too, their bytes queued in
// their sockets; the next process takes both back and serves them. No
// request fails and no keep-alive connection breaks. Without a keeper each
// kill refused every client until the next process listened (3,448-3,735
// requests failed in the same test); with a keeper of listening sockets
// only, the connections in the killed process's hands died with it (7-12
// requests, and every keep-alive connection).
//
// loops: the connections are served on the event loops (else on the
// goroutine data path, as with fault injection on).
func testKillWithKeeper(t *testing.T, bin string, loops bool) {
	e := newEnv(t, bin, "nftables")
	e.noFaults = loops
	e.writeManifest(t, false)
	sock := startKeeper(t, e, filepath.Join(e.dir, "pod", "keeper.sock"))
	// Ready as the DaemonSet's probe says (the admin API's state needs
	// fault injection): a ready file per process, as per pod start.
	start := func(i int) *proc {
		ready := filepath.Join(e.dir, "pod", fmt.Sprintf("ready-%d", i))
		p := e.start(t, "--socket-keeper", sock, "--ready-file", ready)
		waitProbeReady(t, bin, ready)
		return p
	}
	old := start(0)
	e.waitRules(t, []string{webCluster4}, nil)
	load := e.startLoad(t, svcAddr(webCluster4, webTCP), 4, 4)
	bulk := startBulkStream(t, e.tp.Client.DialContext, svcAddr(webCluster4, webTCP).String(), 45)
	// UDP queries from a new socket each, as a resolver's, to an endpoint
	// that answers each 200 ms later (as a DNS server that asked
	// upstream): at every kill some answers are on their way to the
	// process killed. A resolver asks once within its deadline (5 s,
	// resolv.conf's timeout), so each must get its answer.
	udpSvc := svcAddr(webCluster4, webUDP)
	var udpSeq atomic.Int64
	var udpLost killWindowFailures
	udpLoad := startHandoverLoad(t, nil, udpSvc.String(), func() error {
		q := fmt.Sprintf("delay 200ms query %d", udpSeq.Add(1))
		start := time.Now()
		got, err := netnstest.Exchange(e.tp.Client, "udp", udpSvc, []byte(q), 5*time.Second)
		udpLost.note(start, err)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(got, ":"+q) {
			return fmt.Errorf("answer %q to %q", got, q)
		}
		return nil
	}, 6, 0)
	for i := 1; i <= 6; i++ {
		load.waitProgress(t)
		udpLoad.waitProgress(t)
		bulk.waitEchoed(t, 1<<20)
		// SIGKILL, or SIGTERM with no successor beside it (the container
		// alone restarted: a liveness probe, crictl stop): the process
		// leaves its sockets to the keeper and exits at once.
		sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[i%2]
		t.Logf("%s: %v", time.Now().Format("15:04:05.000"), sig)
		if sig == syscall.SIGKILL {
			udpLost.kill(time.Now())
		}
		old.stop(t, sig)
		if sig == syscall.SIGTERM {
			waitLogged(t, old, "no successor serves")
		}
		next := start(i)
		waitLogged(t, next, `"kept":4`) // the killed process's listening sockets, taken back
		waitLogged(t, next, "connections taken over from the socket keeper")
		waitLogged(t, next, "UDP flows taken over from the socket keeper")
		old = next
	}
	load.waitProgress(t)
	udpLoad.waitProgress(t)
	bulk.waitEchoed(t, 1<<20)
	udpOK, udpFailed, _, _ := udpLoad.stop(t)
	udpLost.check(t, "UDP queries answered 200 ms later across the same kills", udpOK, udpFailed, unanswered)
	ok, failed, kaOK, kaFailed := load.stop(t)
	checked, bulkErr := bulk.stop()
	t.Logf("3 kill -9 and 3 SIGTERM with a socket keeper: %d requests, %d failed; keep-alive: %d exchanges, %d failed; bulk: %d MiB echoed and checked",
		ok, failed, kaOK, kaFailed, checked>>20)
	if failed > 0 || kaFailed > 0 {
		t.Errorf("%d of %d connection-per-request requests and %d keep-alive connections failed across kill -9 and restart, want 0", failed, ok+failed, kaFailed)
	}
	if bulkErr != "" {
		t.Errorf("bulk stream across kill -9 and restart: %s; want every byte echoed in order", bulkErr)
	}
}

// killWindowFailures are the requests that failed while kproxy was
// killed under them, and the kills. The one loss a kill may cause
// (docs/operating.md, Connections outlive a kill): what kproxy took in
// the instant before it, before the socket keeper had its copy: a
// connection just accepted, which the exiting process resets, or a
// datagram just read, never sent on. A request that failed otherwise, or
// that started well before the kill, is lost by kproxy.
type killWindowFailures struct {
	mu       sync.Mutex
	kills    []time.Time
	failures []failedRequest
}

type failedRequest struct {
	start time.Time
	err   error
}

// takeWindow bounds the time from a client's connect or send to kproxy's
// accept or read and the keeper's copy (or the send on): microseconds on
// an idle machine, a scheduler's delay on a loaded one (make test's).
const takeWindow = 100 * time.Millisecond

func (w *killWindowFailures) kill(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kills = append(w.kills, at)
}

func (w *killWindowFailures) note(start time.Time, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, failedRequest{start, err})
}

// check logs what of ok+failed requests (what) failed, and fails the test
// for each failure but those that started just before a kill and failed
// as the loss a kill causes looks (lost).
func (w *killWindowFailures) check(t *testing.T, what string, ok, failed int64, lost func(error) bool) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	excused := 0
	for _, f := range w.failures {
		justBefore := slices.ContainsFunc(w.kills, func(k time.Time) bool {
			return !f.start.After(k) && k.Sub(f.start) < takeWindow
		})
		if justBefore && lost(f.err) {
			excused++
			continue
		}
		t.Errorf("%s: one started %s (%s) failed: %v", what, f.start.Format("15:04:05.000000"), w.nearestKill(f.start), f.err)
	}
	t.Logf("%s: %d, %d failed (%d taken in the instant before a kill)", what, ok, failed, excused)
}

// nearestKill says how far from start the nearest kill came (with w.mu
// held), for a failure's message.
func (w *killWindowFailures) nearestKill(start time.Time) string {
	if len(w.kills) == 0 {
		return "no kill"
	}
	near := w.kills[0]
	for _, k := range w.kills[1:] {
		if k.Sub(start).Abs() < near.Sub(start).Abs() {
			near = k
		}
	}
	if near.Before(start) {
		return fmt.Sprintf("%v after the nearest kill", start.Sub(near).Round(time.Millisecond))
	}
	return fmt.Sprintf("%v before the nearest kill", near.Sub(start).Round(time.Millisecond))
}

// reset is a kill's loss of a connection: the exiting process resets it.
func reset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// unanswered is a kill's loss of a datagram: the client's deadline passes.
func unanswered(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// startKeeper runs a socket keeper (the DaemonSet's sidecar) on sock in
// the node's namespace until the test ends; it returns sock.
func startKeeper(t *testing.T, e *env, sock string) string {
	t.Helper()
	keeper := startProc(t, e.tp.Node.Command(context.Background(), e.bin, "keep-sockets", "--socket", sock), filepath.Join(e.dir, "keeper.log"))
	t.Cleanup(func() { keeper.stop(t, syscall.SIGTERM) })
	waitLogged(t, keeper, "socket keeper ready")
	return sock
}
