//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/netnstest"
)

// hijacker is a listener that user nobody runs (perl, from perl-base): it
// prints LISTENING once bound and ACCEPTED for every connection it gets.
const hijacker = `use IO::Socket::INET; $| = 1;
my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0:$ARGV[0]", Listen => 16, Proto => "tcp") or die "bind: $!\n";
print "LISTENING\n";
while (my $c = $s->accept) { print "ACCEPTED\n"; print $c "HIJACKED\n"; close $c; }`

// testNoHijack kills kproxy (-9) in a kernel mode and lets user nobody
// bind its proxy port: the rules left in place deliver redirected traffic
// only to sockets with kproxy's mark, so nobody's listener gets no
// connection; the next kproxy, finding the port taken, takes another and
// serves again.
func testNoHijack(t *testing.T, bin, mode string) {
	need(t, "perl", "setpriv")
	e := newEnv(t, bin, mode)
	redirectTo := ": %d" // nft: the map's verdict
	if mode == "iptables" {
		redirectTo = "--to-ports %d"
	}
	e.writeManifest(t, false)
	p := e.start(t)
	st := e.waitReady(t, p, servicePorts(false))
	e.waitRules(t, []string{webCluster4}, nil)
	svc := svcAddr(webCluster4, webTCP)
	e.expectBackend(t, e.tp.Client, "tcp", svc)
	port := st[spWebTCP].ProxyPort
	p.stop(t, syscall.SIGKILL)

	ctx, cancel := context.WithCancel(context.Background())
	cmd := e.tp.Node.Command(ctx, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "perl", "-e", hijacker, strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	lines := make(chan string, 64)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || l != "LISTENING" {
			t.Fatalf("nobody could not bind proxy port %d: %q %s", port, l, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hijacker did not start")
	}
	t.Logf("user nobody listens on the dead kproxy's proxy port %d", port)

	for range 3 {
		got, err := netnstest.Exchange(e.tp.Client, "tcp", svc, []byte("ping"), time.Second)
		if err == nil || strings.Contains(got, "HIJACKED") {
			t.Fatalf("service traffic reached a process of user nobody: %q %v", got, err)
		}
	}
	select {
	case l := <-lines:
		t.Fatalf("nobody's listener got a connection (%s)", l)
	default:
	}

	// The next kproxy finds the port taken by someone else and moves.
	p2 := e.start(t)
	st2 := e.waitReady(t, p2, servicePorts(false))
	if st2[spWebTCP].ProxyPort == port {
		t.Fatalf("kproxy took proxy port %d, which user nobody holds", port)
	}
	e.waitRules(t, []string{fmt.Sprintf(redirectTo, st2[spWebTCP].ProxyPort)}, nil)
	e.expectBackend(t, e.tp.Client, "tcp", svc)
	select {
	case l := <-lines:
		t.Errorf("nobody's listener got a connection (%s)", l)
	default:
	}
}
