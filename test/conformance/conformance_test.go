//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/test/binarytest"
	"github.com/kproxy/kproxy/test/netnstest"
)

// parallelCases bounds the kproxy instances (each in a topology of its
// own) running at once.
const parallelCases = 4

// TestConformanceKubeProxyFlows runs every packet flow of cases against
// the kproxy binary, with the nftables and with the iptables portal, and
// prints a table of what each flow saw.
func TestConformanceKubeProxyFlows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite needs root (network namespaces, nftables, iptables)")
	}
	netnstest.New(t, "probe") // skips when the kernel refuses namespaces, before the build
	for _, name := range []string{"nft", "iptables-save", "ip6tables-save"} {
		if _, err := exec.LookPath(name); err != nil {
			t.Fatalf("%s not installed (apt-get install -y nftables iptables): %v", name, err)
		}
	}
	bin := binarytest.Build(t)
	flags := supportedFlags(t, bin, "cluster-cidr", "service-cluster-ip-range")
	for f, ok := range flags {
		if !ok {
			t.Logf("this kproxy has no --%s: the flows that need it fail", f)
		}
	}
	res := &results{}
	start := time.Now()
	t.Cleanup(func() { res.report(t, time.Since(start)) })
	sem := make(chan struct{}, parallelCases)
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.id(), func(t *testing.T) {
					t.Parallel()
					if c.notApplicable != "" {
						res.add(row{mode: mode, kcase: c.id(), flow: "(all flows)", status: "n/a", got: c.notApplicable})
						t.Skip(c.notApplicable)
					}
					sem <- struct{}{}
					defer func() { <-sem }()
					runCase(t, bin, mode, c, flags, res)
				})
			}
		})
	}
}

// runCase starts one kproxy on the case's manifest and runs its phases.
func runCase(t *testing.T, bin, mode string, c kpCase, flags map[string]bool, res *results) {
	m, err := readManifest(c.manifest)
	if err != nil {
		t.Fatal(err)
	}
	tp := newTopology(t, c.ports())
	startBackends(t, tp, m)
	npa := nodePortAddresses
	if c.nodePortAddresses != "" {
		npa = c.nodePortAddresses
	}
	args := []string{"--nodeport-addresses", npa}
	if flags["cluster-cidr"] && !c.noClusterCIDR {
		args = append(args, "--cluster-cidr", clusterCIDRs)
	}
	if flags["service-cluster-ip-range"] {
		args = append(args, "--service-cluster-ip-range", serviceCIDRs)
	}
	in := startKproxy(t, bin, mode, tp, m.text(false), args)
	for i, ph := range c.phases {
		if i > 0 {
			in.writeManifest(t, m.text(ph.noSlices))
		}
		note := ""
		if err := in.awaitReady(m, ph.noSlices); err != nil {
			note = err.Error()
			t.Logf("phase %q: %v (the flows run anyway)", ph.name, err)
		}
		name := ph.name
		if name == "" {
			name = "flows"
		}
		// The flows run at once (a drop costs its whole timeout), each in
		// a goroutine of its own; then each reports as a subtest.
		var runs []*flowRun
		for _, f := range ph.flows {
			for _, from := range expand(f.from) {
				runs = append(runs, newFlowRun(mode, c, ph, f, from, note))
			}
		}
		var wg sync.WaitGroup
		for _, fr := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fr.run(tp)
				res.add(fr.row)
			}()
		}
		wg.Wait()
		t.Run(name, func(t *testing.T) {
			for _, fr := range runs {
				t.Run(fr.f.name+" from "+string(fr.from), fr.report)
			}
		})
	}
}

// startBackends serves the manifest's endpoints in the pods' namespace,
// each answering with its own "ip:port".
func startBackends(t *testing.T, tp *topology, m *manifest) {
	t.Helper()
	for _, b := range m.backends {
		name := b.addr.String()
		tp.pods.MustDo(t, func() error {
			if b.proto == "udp" {
				u, err := backends.StartUDP(name, name)
				if err != nil {
					return err
				}
				t.Cleanup(u.Close)
				return nil
			}
			s, err := backends.StartTCP(name, name)
			if err != nil {
				return err
			}
			t.Cleanup(s.Close)
			return nil
		})
	}
}

// ports are the destination ports of the case's flows.
func (c kpCase) ports() []int {
	var ports []int
	for _, ph := range c.phases {
		for _, f := range ph.flows {
			if ap, err := netip.ParseAddrPort(f.to); err == nil && !slices.Contains(ports, int(ap.Port())) {
				ports = append(ports, int(ap.Port()))
			}
		}
	}
	return ports
}

// expand turns kube-proxy's pod into the two pods the suite has.
func expand(s source) []source {
	if s == fromPod {
		return []source{fromPodHere, fromPodThere}
	}
	return []source{s}
}

// flowRun is one flow from one source: what it wants and what it saw.
type flowRun struct {
	f    flow
	from source
	want string // what kproxy must do (kube-proxy's answer unless it differs)
	note string // why kproxy was not ready, if it was not
	row  row
	ok   bool
	err  error // the flow could not run
}

func newFlowRun(mode string, c kpCase, ph phase, f flow, from source, note string) *flowRun {
	proto := f.proto
	if proto == "" {
		proto = "tcp"
	}
	fr := &flowRun{f: f, from: from, want: f.want, note: note,
		row: row{mode: mode, kcase: c.id(), phase: ph.name, flow: f.name, from: string(from), proto: proto, to: f.to, want: f.want}}
	if f.differs != "" {
		fr.want = f.kproxyWant
		fr.row.want = f.kproxyWant + " (kube-proxy: " + f.want + ")"
	}
	return fr
}

func (fr *flowRun) run(tp *topology) {
	if fr.f.notApplicable != "" {
		fr.row.status, fr.row.got = "n/a", fr.f.notApplicable
		return
	}
	dst, err := netip.ParseAddrPort(fr.f.to)
	if err != nil {
		fr.err = err
	}
	var ns *netnstest.Netns
	var src netip.Addr
	if err == nil {
		ns, src, fr.err = tp.from(fr.from, dst.Addr().Is6())
	}
	if fr.err != nil {
		fr.row.status, fr.row.got = "FAILED", fr.err.Error()
		return
	}
	fr.row.from = fmt.Sprintf("%s %s", fr.from, src)
	fr.row.got, fr.ok = check(ns, fr.row.proto, src, dst, fr.want)
	switch {
	case fr.ok && fr.f.differs != "":
		fr.row.status = "differs (documented)"
	case fr.ok:
		fr.row.status = "passed"
	default:
		fr.row.status = "FAILED"
	}
}

func (fr *flowRun) report(t *testing.T) {
	switch {
	case fr.f.notApplicable != "":
		t.Skip(fr.f.notApplicable)
	case fr.err != nil:
		t.Fatal(fr.err)
	case fr.f.differs != "":
		t.Logf("kproxy differs from kube-proxy (%s) deliberately: %s", fr.f.want, fr.f.differs)
	}
	if !fr.ok {
		extra := ""
		if fr.note != "" {
			extra = " (kproxy " + fr.note + ")"
		}
		t.Errorf("%s %s from %s: got %s; want %s%s", fr.row.proto, fr.f.to, fr.row.from, fr.row.got, fr.want, extra)
	}
}

// row is one flow's line in the report.
type row struct {
	mode, kcase, phase, flow, from, proto, to, want, got, status string
}

type results struct {
	mu   sync.Mutex
	rows []row
}

func (r *results) add(x row) {
	r.mu.Lock()
	r.rows = append(r.rows, x)
	r.mu.Unlock()
}

// report logs the table of every flow, in the cases' order, and a count
// per mode and status; with $KPROXY_CONFORMANCE_REPORT set, it also
// writes the table to that file.
func (r *results) report(t *testing.T, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	order := map[string]int{}
	for i, c := range cases {
		order[c.id()] = i
	}
	slices.SortStableFunc(r.rows, func(a, b row) int {
		if a.mode != b.mode {
			return strings.Compare(a.mode, b.mode)
		}
		if order[a.kcase] != order[b.kcase] {
			return order[a.kcase] - order[b.kcase]
		}
		if a.phase != b.phase {
			return strings.Compare(a.phase, b.phase)
		}
		return 0
	})
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STATUS\tMODE\tKUBE-PROXY TEST\tPHASE\tFLOW\tSOURCE\tTO\tWANT\tGOT")
	counts := map[string]map[string]int{}
	for _, x := range r.rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.status, x.mode, x.kcase, x.phase, x.flow, x.from, x.proto+" "+x.to, x.want, x.got)
		if counts[x.mode] == nil {
			counts[x.mode] = map[string]int{}
		}
		counts[x.mode][x.status]++
	}
	w.Flush()
	for _, mode := range []string{"nftables", "iptables"} {
		fmt.Fprintf(&b, "%s: %d passed, %d failed, %d differ (documented), %d not applicable\n", mode,
			counts[mode]["passed"], counts[mode]["FAILED"], counts[mode]["differs (documented)"], counts[mode]["n/a"])
	}
	fmt.Fprintf(&b, "suite took %v\n", took.Round(time.Second))
	t.Log("\n" + b.String())
	if path := os.Getenv("KPROXY_CONFORMANCE_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write report: %v", err)
		}
	}
}
