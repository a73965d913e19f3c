package datapath

import (
	"net"
	"os"
	"os/exec"
	"testing"
	"time"
)

// While serving is held, a parked listener's connection completes in the
// kernel and waits unaccepted; StartServing serves it. The gate is the
// process's, so the test runs in a process of its own.
func TestHoldServingUntilStartServing(t *testing.T) {
	if os.Getenv("KPROXY_START_GATE_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHoldServingUntilStartServing$", "-test.v")
		cmd.Env = append(os.Environ(), "KPROXY_START_GATE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	HoldServing()
	backend := namedBackend(t, "b1")
	l := openTCP(t)
	l.Serve(parkOptions(backend))
	c, err := net.Dial("tcp", addrOf(l))
	if err != nil {
		t.Fatal(err) // the kernel completes the handshake into the backlog
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); n != 0 || !isTimeout(err) {
		t.Fatalf("a held listener served a connection: read %d bytes, %v", n, err)
	}
	if parked, running := l.state(); !parked || running {
		t.Fatalf("while held: parked %v, loop running %v; want parked, no loop", parked, running)
	}
	StartServing()
	StartServing() // a second call does nothing
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "b1" {
		t.Fatalf("after StartServing: read %q, %v; want b1", buf[:n], err)
	}
	if got, err := ask(addrOf(l)); err != nil || got != "b1" {
		t.Fatalf("a new connection after StartServing: %q, %v", got, err)
	}
}
