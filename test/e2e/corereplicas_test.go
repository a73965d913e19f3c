//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

// The core network of TestCoreReplicaKilledUnderLoad (203.0.113.0/24):
// the three core replicas run in a namespace of their own, each on an
// address of its loopback; each node namespace (a topology of its own,
// env_test.go) reaches them over a veth of its own, and the replica
// serving a node dials the node's remoting back on the node's end:
//
//	node-a kr0 203.0.113.34/30 --- kr0 203.0.113.33/30 \
//	                                                     core  replicas 203.0.113.11-13 (lo)
//	node-b kr0 203.0.113.38/30 --- kr1 203.0.113.37/30 /
const (
	replicaNet        = "203.0.113.0/28" // the replicas' addresses, routed from each node
	replicaPort       = 7400             // each replica's remoting (--serve), on its own address
	replicaHealthPort = 7410             // each replica's cluster health endpoint (automanaged provider), on its own address
	nodeRemotePort    = 7500             // each node proxy's remoting, on its end of its veth to the core

	snapshotApplied = "snapshot from the core applied"
)

func replicaIP(i int) netip.Addr  { return netip.AddrFrom4([4]byte{203, 0, 113, byte(11 + i)}) }
func coreLinkIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(33 + 4*i)}) }
func nodeLinkIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(34 + 4*i)}) }

// TestCoreReplicaKilledUnderLoad: three core replicas (kproxy watch
// --serve, an automanaged protoactor cluster) serve two node proxies
// (kproxy run --source remote:R1,R2,R3 with the nftables portal, each in
// a node namespace with a client and backends of its own). Under a
// connection-per-request load through the cluster IP from each node's
// client, and while the endpoints change five times a second, the replica
// serving node-a is killed with SIGKILL (node-b is named so that placement
// puts it on another replica: it must not notice).
// Each node it served applies a snapshot from another replica (its log's
// "core") within 5 s of the kill, and that replica logged its
// subscription; no request fails, before, during or after; once the
// churn stops, each node logs the last endpoints within 5 s of their
// change and serves only them through its portal. Awaited on the
// processes' logs and on requests, never slept for.
func TestCoreReplicaKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("three core replicas and two node proxies in network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Skip("end-to-end portal tests need root (network namespaces, nftables)")
	}
	need(t, "nft")
	netnstest.New(t, "probe") // skips when the kernel refuses namespaces, before the build
	bin := binarytest.Build(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "remote-token")
	if err := os.WriteFile(token, []byte("core-replicas-e2e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Remoting between namespaces is off loopback: a shared token.
	remoteAuth := []string{"--remote-allow-non-loopback", "--remote-token-file", token}

	// Two nodes, each a topology of its own (client, node, backend). Their
	// backends have the same addresses, so one manifest serves both.
	nodes := []*env{newEnv(t, bin, "nftables"), newEnv(t, bin, "nftables")}
	names := nodesOnTwoReplicas()
	ep0, ep1 := nodes[0].be.IPs4[0], nodes[0].be.IPs4[1]
	svc := svcAddr(webCluster4, webTCP)
	src := nodes[0] // the replicas read node-a's env's manifest file (node-b's is unused)
	src.replaceManifest(t, replicaManifest(ep0))

	core := netnstest.New(t, "core")
	for i := range 3 {
		core.AddAddr(t, "lo", replicaIP(i).String()+"/32")
	}
	for i, e := range nodes {
		dev := fmt.Sprintf("kr%d", i)
		netnstest.Veth(t, core, dev, e.tp.Node, "kr0")
		core.AddAddr(t, dev, coreLinkIP(i).String()+"/30")
		e.tp.Node.AddAddr(t, "kr0", nodeLinkIP(i).String()+"/30")
		e.tp.Node.MustRun(t, "ip", "route", "add", replicaNet, "via", coreLinkIP(i).String(), "dev", "kr0")
	}

	addrs, health := make([]string, 3), make([]string, 3)
	for i := range 3 {
		addrs[i] = netip.AddrPortFrom(replicaIP(i), replicaPort).String()
		health[i] = netip.AddrPortFrom(replicaIP(i), replicaHealthPort).String()
	}
	replicas := make([]*proc, 3)
	for i := range replicas {
		args := append([]string{"watch", "--serve", addrs[i], "--source", "file:" + src.manifest,
			"--file-poll-interval", "20ms", "--min-sync-period", "10ms", "--log-level", "debug", "--log-format", "json",
			"--serve-cluster", "automanaged", "--serve-cluster-peers", strings.Join(health, ","),
			"--serve-cluster-health-address", health[i]}, remoteAuth...)
		replicas[i] = startProc(t, core.Command(context.Background(), bin, args...), filepath.Join(dir, fmt.Sprintf("replica-%d.log", i+1)))
		t.Logf("started replica %d (pid %d): %s", i+1, replicas[i].Cmd.Process.Pid, strings.Join(args, " "))
	}
	for _, r := range replicas {
		waitLogged(t, r, "core serving")
	}

	procs := make([]*proc, len(nodes))
	for i, e := range nodes {
		args := append([]string{"run", "--portal", "nftables", "--source", "remote:" + strings.Join(addrs, ","), "--node-name", names[i],
			"--remote-listen", netip.AddrPortFrom(nodeLinkIP(i), nodeRemotePort).String(),
			"--log-format", "json", "--proxy-ports-file", filepath.Join(e.dir, "proxy-ports.json"), "--min-sync-period", "10ms",
			"--shutdown-grace-period", "2s"}, remoteAuth...)
		procs[i] = startProc(t, e.tp.Node.Command(context.Background(), bin, args...), filepath.Join(dir, names[i]+".log"))
		t.Logf("started %s (pid %d): %s", names[i], procs[i].Cmd.Process.Pid, strings.Join(args, " "))
	}
	for i, e := range nodes {
		waitLogged(t, procs[i], "source synced")
		e.waitRules(t, []string{webCluster4}, nil) // the kernel portal's rules for the cluster IP
		if d, err := e.awaitOnly(svc, ep0.String(), 15*time.Second); err != nil {
			t.Fatalf("%s before the churn: %v", names[i], err)
		} else {
			t.Logf("%s serves %s through its nftables portal (%v)", names[i], ep0, d.Round(time.Millisecond))
		}
	}

	loads := make([]*handoverLoad, len(nodes))
	for i, e := range nodes {
		loads[i] = e.startLoad(t, svc, 2, 0)
	}
	loadsStopped := false
	t.Cleanup(func() {
		if !loadsStopped {
			for _, l := range loads {
				l.stop(t)
			}
		}
	})
	for _, l := range loads {
		l.waitProgress(t)
	}

	// Churn: the endpoints alternate between {ep0, ep1} and {ep0} every
	// 200 ms (an even count of steps ends on {ep0}); the last state, {ep1}
	// alone, is none of them, so a node serving only ep1 has applied it.
	// The victim is killed after the fifth step.
	const churnEvery, churnSteps, killAfter = 200 * time.Millisecond, 46, 5
	churn := []string{replicaManifest(ep0, ep1), replicaManifest(ep0)}
	stopWatch := make(chan struct{})
	watchStopped := false
	stopWatching := func() {
		if !watchStopped {
			watchStopped = true
			close(stopWatch)
		}
	}
	t.Cleanup(stopWatching)
	var (
		victim   = -1
		killed   time.Time
		okAtKill = make([]int64, len(loads))
		affected []int
		resynced = map[int]<-chan time.Time{}
		lost     = map[int]<-chan time.Time{}
	)
	tick := time.NewTicker(churnEvery) // pacing of the churn, not synchronisation
	defer tick.Stop()
	for step := 0; step < churnSteps; step++ {
		<-tick.C
		src.replaceManifest(t, churn[step%2])
		if step != killAfter-1 {
			continue
		}
		// Which replica serves each node, as its last snapshot says.
		serving := make([]int, len(nodes))
		for i := range nodes {
			serving[i] = slices.Index(addrs, servedBy(procs[i]))
			if serving[i] < 0 {
				t.Fatalf("%s's last %q names core %q, not one of the replicas %v", names[i], snapshotApplied, servedBy(procs[i]), addrs)
			}
		}
		victim = serving[0]
		for i := range nodes {
			if serving[i] != victim {
				continue
			}
			affected = append(affected, i)
			if countIn(replicas[victim].Log, "backend subscribed", nodeField(names[i])) == 0 {
				t.Fatalf("%s is served by replica %d (%s), which logged no subscription of it", names[i], victim+1, addrs[victim])
			}
			log, gone := procs[i].Log, coreField(addrs[victim])
			before := countIn(log, snapshotApplied) - countIn(log, snapshotApplied, gone)
			lostBefore := countIn(log, "lost the core")
			resynced[i] = watchLog(stopWatch, func() bool { return countIn(log, snapshotApplied)-countIn(log, snapshotApplied, gone) > before })
			lost[i] = watchLog(stopWatch, func() bool { return countIn(log, "lost the core") > lostBefore })
		}
		t.Logf("killing replica %d (%s), serving %v (nodes served by replicas %v)", victim+1, addrs[victim], nodeNames(names, affected), serving)
		for i, l := range loads {
			okAtKill[i] = l.ok.Load()
		}
		killed = time.Now()
		replicas[victim].stop(t, syscall.SIGKILL)
	}
	churned := time.Since(killed)
	stopWatching()

	// Each node the victim served applied a snapshot from a survivor
	// within 5 s of the kill, and that survivor logged its subscription.
	for _, i := range affected {
		at, ok := <-resynced[i]
		if !ok {
			t.Errorf("%s: no %q from another replica within %v of the kill (the churn's end)", names[i], snapshotApplied, churned.Round(time.Millisecond))
			continue
		}
		noticed := "never logged"
		if lostAt, ok := <-lost[i]; ok {
			noticed = lostAt.Sub(killed).Round(time.Millisecond).String()
		}
		now := servedBy(procs[i])
		k := slices.Index(addrs, now)
		t.Logf("%s: lost the core after %s, snapshot from replica %d (%s) applied %v after the kill",
			names[i], noticed, k+1, now, at.Sub(killed).Round(time.Millisecond))
		if d := at.Sub(killed); d > 5*time.Second {
			t.Errorf("%s resynced %v after the kill, want within 5s", names[i], d.Round(time.Millisecond))
		}
		if k < 0 || k == victim {
			t.Errorf("%s now served by %q, want a surviving replica of %v", names[i], now, addrs)
		} else if countIn(replicas[k].Log, "backend subscribed", nodeField(names[i])) == 0 {
			t.Errorf("replica %d (%s) serves %s but logged no subscription of it", k+1, now, names[i])
		}
	}
	for i := range nodes {
		if slices.Contains(affected, i) {
			continue
		}
		// Crash isolation: a node served by another replica does not
		// notice the kill.
		t.Logf("%s, not served by the killed replica, is served by %s", names[i], servedBy(procs[i]))
		if n := countIn(procs[i].Log, "lost the core"); n != 0 {
			t.Errorf("%s, served by a surviving replica, lost its core %d times", names[i], n)
		}
		if n := countIn(procs[i].Log, snapshotApplied); n != 1 {
			t.Errorf("%s, served by a surviving replica, applied %d snapshots, want its first only", names[i], n)
		}
	}
	for _, l := range loads {
		l.waitProgress(t) // requests still flow after the kill
	}

	// The last change reaches every node within 5 s: each logs its one
	// endpoint (ep1 alone, a state the churn never made, so the line is
	// this change's), then serves it through its portal.
	final := `"endpoints":["` + netip.AddrPortFrom(ep1, backendTCP).String() + `"]`
	stopFinal := make(chan struct{})
	applied := make([]<-chan time.Time, len(nodes))
	for i := range nodes {
		log := procs[i].Log
		applied[i] = watchLog(stopFinal, func() bool { return countIn(log, "service port updated", `"servicePort":"`+spWebTCP+`"`, final) > 0 })
	}
	changed := time.Now()
	src.replaceManifest(t, replicaManifest(ep1))
	giveUp := time.NewTimer(15 * time.Second)
	defer giveUp.Stop()
	for i, e := range nodes {
		select {
		case at := <-applied[i]:
			d := at.Sub(changed)
			t.Logf("%s applied the last endpoints (%s) %v after their change", names[i], ep1, d.Round(time.Millisecond))
			if d > 5*time.Second {
				t.Errorf("%s applied the last endpoints %v after their change, want within 5s", names[i], d.Round(time.Millisecond))
			}
		case <-giveUp.C:
			close(stopFinal)
			t.Fatalf("%s did not log %s within 15s of the change", names[i], final)
		}
		if d, err := e.awaitOnly(svc, ep1.String(), 5*time.Second); err != nil {
			t.Errorf("%s after the churn: %v", names[i], err)
		} else {
			t.Logf("%s serves only %s through its portal (20 answers in a row from it, the first after %v of probing)", names[i], ep1, d.Round(time.Millisecond))
		}
	}
	close(stopFinal)

	loadsStopped = true
	for i, l := range loads {
		ok, failed, _, _ := l.stop(t)
		t.Logf("%s load: %d requests through the portal (%d succeeded after the kill), %d failed", names[i], ok+failed, ok-okAtKill[i], failed)
		if failed != 0 {
			t.Errorf("%s: %d of %d requests failed, want 0", names[i], failed, ok+failed)
		}
		if ok-okAtKill[i] < 100 {
			t.Errorf("%s: only %d requests succeeded after the kill: the load did not run through it", names[i], ok-okAtKill[i])
		}
	}
	t.Logf("%d endpoint changes in %v, replica %d killed after the %dth; churn went on %v after the kill",
		churnSteps+1, time.Duration(churnSteps)*churnEvery, victim+1, killAfter, churned.Round(time.Millisecond))
}

// replicaManifest is e2e/web: cluster IP webCluster4, http 80/TCP, to
// the backends' TCP port on eps.
func replicaManifest(eps ...netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: web, namespace: e2e}
spec:
  clusterIP: %[1]s
  ports:
  - {name: http, protocol: TCP, port: %[2]d, targetPort: %[3]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-ipv4
  namespace: e2e
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, protocol: TCP, port: %[3]d}
endpoints:
`, webCluster4, webTCP, backendTCP)
	for _, ip := range eps {
		fmt.Fprintf(&b, "- {addresses: [\"%s\"], conditions: {ready: true}}\n", ip)
	}
	return b.String()
}

// awaitOnly asks svc from the client until 20 answers in a row come from
// the backend want, and returns how long that took (from the call to the
// first of the 20), or an error after within.
func (e *env) awaitOnly(svc netip.AddrPort, want string, within time.Duration) (time.Duration, error) {
	start := time.Now()
	var streakFrom time.Time
	streak, last := 0, "nothing"
	for time.Since(start) < within {
		at := time.Now()
		name, err := e.askBackend(e.tp.Client, "tcp", svc, time.Second)
		switch {
		case err != nil:
			streak, last = 0, err.Error()
		case name != want:
			streak, last = 0, "answered by "+name
		default:
			if streak == 0 {
				streakFrom = at
			}
			if streak++; streak == 20 {
				return streakFrom.Sub(start), nil
			}
		}
	}
	return 0, fmt.Errorf("%s not answered only by %s within %v (last: %s)", svc, want, within, last)
}

// servedBy is the "core" of the last snapshot a node proxy's log shows
// applied: the replica serving it.
func servedBy(p *proc) string {
	raw, _ := os.ReadFile(p.Log)
	core := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, snapshotApplied) {
			continue
		}
		var ev struct {
			Core string `json:"core"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil {
			core = ev.Core
		}
	}
	return core
}

func coreField(addr string) string { return `"core":"` + addr + `"` }
func nodeField(node string) string { return `"node":"` + node + `"` }

func nodeNames(names []string, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, names[i])
	}
	return out
}

// watchLog reports when cond (on a log file) first holds: it checks every
// 20 ms until it does or stop is closed; the channel is closed without a
// time if it never did.
func watchLog(stop <-chan struct{}, cond func() bool) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		defer close(ch)
		tick := time.NewTicker(20 * time.Millisecond) // a log file: nothing to await
		defer tick.Stop()
		for {
			if cond() {
				ch <- time.Now()
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// nodesOnTwoReplicas names two nodes that protoactor's placement puts on
// different replicas (rendezvous hashing over the replicas' addresses, as
// disthash does), so that killing one's replica leaves the other's alone.
func nodesOnTwoReplicas() []string {
	rdv := cluster.NewRendezvous()
	var members cluster.Members
	for i := range 3 {
		members = append(members, &cluster.Member{Id: fmt.Sprint(i), Host: replicaIP(i).String(), Port: replicaPort, Kinds: []string{remote.NodeKind}})
	}
	rdv.UpdateMembers(members)
	owner := func(node string) string {
		return rdv.GetByClusterIdentity(cluster.NewClusterIdentity(node, remote.NodeKind))
	}
	for i := 0; ; i++ {
		if b := fmt.Sprintf("node-b%d", i); owner(b) != owner("node-a") {
			return []string{"node-a", b}
		}
	}
}
