package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// hollowPerHost is how many hollow nodes a child process runs.
const hollowPerHost = 100

// HollowHosts are the child processes running a round's hollow nodes.
type HollowHosts []*hollowChild

// StartHollowHosts starts n hollow nodes node-0 to node-N-1, 100 per
// child process run as host says (its argv: a program whose
// ServeHollowHost runs them), following the core at core (or, with env's
// settings for host's NewHollowNode, each its own way); it returns once
// every one has its first state, telling progress how far they are. The
// caller stops them with Stop.
func StartHollowHosts(host []string, n int, core string, progress io.Writer, env ...string) (HollowHosts, error) {
	if len(host) == 0 {
		return nil, errors.New("hollow hosts: no command to run them")
	}
	var hosts HollowHosts
	for first := 0; first < n; first += hollowPerHost {
		var names []string
		for i := first; i < min(n, first+hollowPerHost); i++ {
			names = append(names, fmt.Sprintf("node-%d", i))
		}
		h, err := startHollowChild(host, core, names, env)
		if err != nil {
			hosts.Stop()
			return nil, err
		}
		hosts = append(hosts, h)
	}
	ready := NewPhaseProgress(progress, "hollow nodes ready", n)
	for i, h := range hosts {
		if err := h.expectLine("ready"); err != nil {
			hosts.Stop()
			return nil, fmt.Errorf("hollow host: %w", err)
		}
		ready.At(min(n, (i+1)*hollowPerHost))
	}
	return hosts, nil
}

// Stop ends the hosts' processes: a round's nodes must not load the next
// round.
func (hs HollowHosts) Stop() {
	for _, h := range hs {
		h.stop()
	}
}

// HollowStores is what the hosts measured of a round's changes: change →
// store over every node (rounded as the tables print them) and how many
// node × service pairs did not get their service's last change.
// CPU is the hosts' CPU time so far (user and system, from /proc): what
// the hollow nodes' backends cost, decoding and applying what the core
// sends. Zero without /proc.
func (hs HollowHosts) CPU() time.Duration {
	var sum time.Duration
	for _, h := range hs {
		if cpu, err := ProcessCPU(h.cmd.Process.Pid); err == nil {
			sum += cpu
		}
	}
	return sum
}

type HollowStores struct {
	P50, P99, Max time.Duration
	Lost          int
}

// Collect tells every host which change of each service (svc-I) came
// last, at its trigger time, and gathers what they measured.
func (hs HollowHosts) Collect(last map[int]time.Time) (HollowStores, error) {
	for _, h := range hs {
		w := bufio.NewWriter(h.in)
		for i, at := range last {
			fmt.Fprintf(w, "expect hollow/svc-%d %d\n", i, at.UnixNano())
		}
		fmt.Fprintln(w, "end")
		if err := w.Flush(); err != nil {
			return HollowStores{}, fmt.Errorf("hollow host: send the last changes: %w", err)
		}
	}
	all := newLatencyHist()
	var s HollowStores
	for _, h := range hs {
		line, err := h.line()
		if err != nil {
			return HollowStores{}, fmt.Errorf("hollow host: %w", err)
		}
		var rep hollowReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			return HollowStores{}, fmt.Errorf("hollow host's result %q: %w", line, err)
		}
		all.Merge(hdrhistogram.Import(rep.Hist))
		s.Lost += rep.Lost
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	s.P50 = us(all.ValueAtQuantile(50)).Round(100 * time.Microsecond)
	s.P99 = us(all.ValueAtQuantile(99)).Round(100 * time.Microsecond)
	s.Max = us(all.Max()).Round(time.Millisecond)
	return s, nil
}

type hollowChild struct {
	cmd  *exec.Cmd
	in   *os.File
	outf *os.File
	out  *bufio.Reader
}

// startHollowChild starts a host of nodes, following the core at core,
// with env besides.
func startHollowChild(host []string, core string, nodes, env []string) (*hollowChild, error) {
	cmd := exec.Command(host[0], host[1:]...)
	cmd.Env = append(os.Environ(), EnvHollowHost+"=1", envHollowCore+"="+core, envHollowNodes+"="+strings.Join(nodes, ","))
	cmd.Env = append(cmd.Env, env...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("hollow host: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("hollow host: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start a hollow host (%s): %w", host[0], err)
	}
	return &hollowChild{cmd: cmd, in: inW, outf: outR, out: bufio.NewReader(outR)}, nil
}

// line is the host's next line of its own (others, such as a test
// framework's, are skipped).
func (h *hollowChild) line() (string, error) {
	for {
		l, err := h.out.ReadString('\n')
		if err != nil {
			return "", err
		}
		if rest, ok := strings.CutPrefix(l, hollowPrefix); ok {
			return strings.TrimSpace(rest), nil
		}
	}
}

func (h *hollowChild) expectLine(want string) error {
	got, err := h.line()
	if err == nil && got != want {
		err = fmt.Errorf("said %q, want %q", got, want)
	}
	return err
}

func (h *hollowChild) stop() {
	h.in.Close()
	if h.cmd.Process.Signal(terminateSignal) != nil {
		_ = h.cmd.Process.Kill() // no signals (Windows)
	}
	_ = h.cmd.Wait()
	h.outf.Close()
}
