//go:build linux

package conformance

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

// Timeouts of a probe.
const (
	// rejectWithin is how soon a refusal must come: a reject is answered
	// at once (RST or ICMP), well under TCP's first SYN retransmission (1 s).
	rejectWithin = time.Second
	// dropWait is how long silence must last to count as a drop: past the
	// first SYN retransmission, so a SYN answered late still shows.
	dropWait = 1500 * time.Millisecond
	// answerWithin bounds a connection that should reach an endpoint.
	answerWithin = 2 * time.Second
	// convergeWithin bounds the retries of a flow whose first probes
	// disagree: rules may land a little after the admin API shows a change.
	convergeWithin = 3 * time.Second
)

// outcome is what one connection saw.
type outcome struct {
	kind string // "answer", "other", "refused", "timeout", "reset", "error"
	who  string // the endpoint that answered, or what another server said
	err  error
	took time.Duration
}

func (o outcome) String() string {
	switch o.kind {
	case "answer":
		return o.who
	case "other":
		return fmt.Sprintf("answered %q, not by an endpoint", o.who)
	case "refused", "timeout":
		return fmt.Sprintf("%s after %v", o.kind, o.took.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s after %v: %v", o.kind, o.took.Round(time.Millisecond), o.err)
}

// probe connects from src in ns to dst, sends "ping" and reads which
// endpoint answered: TCP backends send "ip:port\n" first, UDP ones answer
// "ip:port:ping".
func probe(ns *netnstest.Netns, proto string, src netip.Addr, dst netip.AddrPort, timeout time.Duration) outcome {
	start := time.Now()
	o := probeOnce(ns, proto, src, dst, timeout)
	o.took = time.Since(start)
	return o
}

func probeOnce(ns *netnstest.Netns, proto string, src netip.Addr, dst netip.AddrPort, timeout time.Duration) outcome {
	deadline := time.Now().Add(timeout)
	var c net.Conn
	err := ns.Do(func() (err error) {
		d := net.Dialer{Deadline: deadline}
		if proto == "udp" {
			d.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		c, err = d.Dial(proto, dst.String())
		return err
	})
	if err != nil {
		return classify(err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if proto == "udp" {
		if _, err := c.Write([]byte("ping")); err != nil {
			return classify(err)
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			return classify(err)
		}
		who, ok := strings.CutSuffix(string(buf[:n]), ":ping")
		if !ok {
			return outcome{kind: "other", who: string(buf[:n])}
		}
		return outcome{kind: "answer", who: who}
	}
	// Endpoints send "ip:port\n" first (test/backends); anything else
	// came from another server (upstream answers "pp=PORT" and closes).
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	switch {
	case err == nil:
		return outcome{kind: "answer", who: strings.TrimSuffix(line, "\n")}
	case line != "":
		return outcome{kind: "other", who: line}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return outcome{kind: "error", err: errors.New("connected, then silence")}
	}
	return outcome{kind: "reset", err: fmt.Errorf("connected, then closed: %w", err)}
}

func classify(err error) outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EPERM):
		// RST or ICMP unreachable; EPERM is what the node's own socket
		// sees when a reject in the output hook stops its packet.
		return outcome{kind: "refused", err: err}
	case errors.As(err, &ne) && ne.Timeout():
		return outcome{kind: "timeout", err: err}
	}
	return outcome{kind: "error", err: err}
}

// check runs one flow (retrying while its probes disagree, within
// convergeWithin) and returns what it saw and whether that is what it
// wants.
func check(ns *netnstest.Netns, proto string, src netip.Addr, dst netip.AddrPort, want string) (string, bool) {
	deadline := time.Now().Add(convergeWithin)
	for {
		got, ok := checkOnce(ns, proto, src, dst, want)
		if ok || time.Now().After(deadline) {
			return got, ok
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkOnce(ns *netnstest.Netns, proto string, src netip.Addr, dst netip.AddrPort, want string) (string, bool) {
	switch want {
	case wantReject:
		o := probe(ns, proto, src, dst, answerWithin)
		return o.String(), o.kind == "refused" && o.took < rejectWithin
	case wantDrop:
		o := probe(ns, proto, src, dst, dropWait)
		return o.String(), o.kind == "timeout"
	case wantNone:
		o := probe(ns, proto, src, dst, dropWait)
		return o.String(), o.kind != "answer"
	}
	// A set of endpoints: every connection reaches one of them, and
	// together they reach all. Round robin needs 2 per endpoint; random
	// choice misses one of n with odds under n*(1-1/n)^N, N = 4n+4.
	wantSet := strings.Fields(want)
	n := 4*len(wantSet) + 4
	seen := map[string]bool{}
	for range n {
		o := probe(ns, proto, src, dst, answerWithin)
		if o.kind != "answer" {
			return o.String(), false
		}
		if !slices.Contains(wantSet, o.who) {
			return "answered by " + o.who, false
		}
		seen[o.who] = true
	}
	got := make([]string, 0, len(seen))
	for w := range seen {
		got = append(got, w)
	}
	slices.Sort(got)
	return strings.Join(got, " "), len(seen) == len(wantSet)
}
