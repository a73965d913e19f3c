package datapath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
	"golang.org/x/sys/unix"
)

// echoBackend is the harness's echo (its name first, then what it
// reads, then its own half-close once the client closed its half).
func echoBackend(t *testing.T) string {
	t.Helper()
	b, err := backends.StartTCP("echo", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// loopProxy serves a listener to endpoint on the event loops.
func loopProxy(t *testing.T, endpoint string, conns *ConnTracker, limits *Limits, stats *Stats) string {
	t.Helper()
	return serveTo(t, &TCPProxy{Conns: conns, Limits: limits, Stats: stats, EventLoops: true}, endpoint)
}

// serveTo serves p on a loopback listener, every connection to endpoint,
// until the test ends.
func serveTo(t *testing.T, p *TCPProxy, endpoint string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Picker = PickerFunc(func(string, []string, bool) (string, error) { return endpoint, nil })
	served := make(chan struct{})
	go func() { defer close(served); p.Serve(ln.(*net.TCPListener), nil) }()
	t.Cleanup(func() { ln.Close(); <-served })
	return ln.Addr().String()
}

// echoOnce sends msg, half-closes, and wants the backend's name and msg
// back, then the end of the stream.
func echoOnce(addr, msg string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	got, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if want := "echo\n" + msg; string(got) != want {
		return errors.New("echo: got " + string(got))
	}
	return nil
}

// A panic while a loop handles one connection's event costs that
// connection only: under load on two services whose connections share
// the loops, every connection of one panics, and the other fails none;
// the loops then serve the first again.
func TestLoopPanicCostsOnlyItsConnection(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	calmEP, boomEP := echoBackend(t), echoBackend(t)
	calm := loopProxy(t, calmEP, nil, nil, nil)
	boom := loopProxy(t, boomEP, nil, nil, nil)
	var panics atomic.Int64
	fault := func(c *loopConn) {
		if c.endpoint == boomEP {
			panics.Add(1)
			panic("injected")
		}
	}
	loopFault.Store(&fault)
	t.Cleanup(func() { loopFault.Store(nil) })

	const clients, requests = 4, 200
	var calmFailed, boomServed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range requests {
				if echoOnce(calm, "calm") != nil {
					calmFailed.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range requests {
				if echoOnce(boom, "boom") == nil {
					boomServed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("calm: %d of %d failed; boom: %d served, %d panics", calmFailed.Load(), clients*requests, boomServed.Load(), panics.Load())
	if calmFailed.Load() > 0 {
		t.Fatalf("%d of the calm service's %d requests failed while the other's connections panicked on the same loops", calmFailed.Load(), clients*requests)
	}
	if boomServed.Load() > 0 || panics.Load() == 0 {
		t.Fatalf("%d requests served through panicking events (%d panics): the fault was not injected", boomServed.Load(), panics.Load())
	}
	loopFault.Store(nil)
	if err := echoOnce(boom, "after"); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
}

// A loop held up while handling one connection's event (here by a
// fault; in life, its thread preempted by the kernel) holds only that
// event: the loops take turns at one set, so connections that come
// meanwhile are served by the others.
func TestLoopHeldUpHoldsOnlyItsEvent(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one loop: nothing else to serve")
	}
	heldEP, otherEP := echoBackend(t), echoBackend(t)
	held := loopProxy(t, heldEP, nil, nil, nil)
	other := loopProxy(t, otherEP, nil, nil, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fault := func(c *loopConn) {
		if c.endpoint == heldEP {
			once.Do(func() { close(entered); <-release })
		}
	}
	loopFault.Store(&fault)
	t.Cleanup(func() { loopFault.Store(nil) })
	defer once.Do(func() {}) // a failure before the fault fired

	heldDone := make(chan error, 1)
	go func() { heldDone <- echoOnce(held, "held") }()
	select {
	case <-entered:
	case err := <-heldDone:
		t.Fatalf("the held connection ended before its fault: %v", err)
	}
	for i := range 20 {
		if err := echoOnce(other, "other"); err != nil {
			close(release)
			t.Fatalf("connection %d while a loop is held up: %v", i, err)
		}
	}
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatalf("the held connection, released: %v", err)
	}
}

// A connect still in progress when the first connect returns (an
// endpoint on another node) is finished by the loop: its bytes, its
// half-close and its counters are the same as a connect done at once.
func TestLoopFinishesConnectsInProgress(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	connectInLoop.Store(true)
	t.Cleanup(func() { connectInLoop.Store(false) })
	conns, stats := NewConnTracker(), &Stats{}
	limits := &Limits{MaxConns: 100}
	addr := loopProxy(t, echoBackend(t), conns, limits, stats)
	for i := range 50 {
		if err := echoOnce(addr, "in progress"); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	drained(t, conns)
	if c, _, _, _ := limits.Counts(); c != 0 {
		t.Fatalf("%d connections still held in the limits", c)
	}
	if got := stats.DialFailures.Load(); got != 0 {
		t.Fatalf("%d dial failures", got)
	}
	if got, want := stats.BytesToEndpoint.Load(), int64(50*len("in progress")); got != want {
		t.Fatalf("%d bytes to the endpoint, want %d", got, want)
	}
}

// Closing a loop's connections from another goroutine (a drain's
// deadline) ends them at once and gives back what they held.
func TestLoopConnectionsCloseFromTheTracker(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	conns := NewConnTracker()
	limits := &Limits{MaxConns: 100}
	addr := loopProxy(t, echoBackend(t), conns, limits, nil)
	var clients []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rd := bufio.NewReader(c)
		io.WriteString(c, "hello\n")
		for _, want := range []string{"echo\n", "hello\n"} {
			if line, err := rd.ReadString('\n'); err != nil || line != want {
				t.Fatalf("got %q, %v; want %q", line, err, want)
			}
		}
		clients = append(clients, c)
	}
	if n := conns.Len(); n != 10 {
		t.Fatalf("%d connections tracked, want 10", n)
	}
	conns.CloseAll()
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("client %d after CloseAll: %v, want the end of the stream", i, err)
		}
	}
	drained(t, conns)
	if c, _, _, _ := limits.Counts(); c != 0 {
		t.Fatalf("%d connections still held in the limits after CloseAll", c)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// drained waits for every tracked connection to end; a loop gives back
// its limits before the tracker.
func drained(t *testing.T, conns *ConnTracker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left := conns.Drain(ctx); left != 0 {
		t.Fatalf("%d connections still tracked", left)
	}
}

// A client that reads in small bites with pauses is served every byte in
// order: the loop holds what the client cannot take, stops reading the
// endpoint meanwhile, and goes on when the client's socket drains
// (EPOLLOUT). Written at once or 500 bytes at a time, the stream fills
// the client's socket while spliced, so its chunks are held in their
// pipe (dropping them fails it); the next test holds a small chunk.
func TestLoopSlowReaderGetsEveryByte(t *testing.T) {
	if theLoops() != nil {
		t.Skip("no event loops here")
	}
	for _, tc := range []struct {
		name        string
		size, write int
	}{
		{"bulk", 8 << 20, 8 << 20},
		{"small chunks", 2 << 20, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := make([]byte, tc.size)
			for i := range sent {
				sent[i] = byte(i*7 + i>>12)
			}
			conns := NewConnTracker()
			addr := loopProxy(t, streamBackend(t, sent, tc.write), conns, nil, nil)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			got := make([]byte, 0, tc.size)
			buf := make([]byte, 4096)
			for reads := 0; ; reads++ {
				if reads%64 == 0 {
					time.Sleep(20 * time.Millisecond) // the slow reader's pause, not synchronisation
				}
				n, err := c.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %d bytes: %v", len(got), err)
				}
			}
			if !bytes.Equal(got, sent) {
				t.Fatalf("got %d bytes, want the %d sent, in order", len(got), tc.size)
			}
			c.Close() // the other direction's end: the connection is over
			drained(t, conns)
		})
	}
}

// A small chunk the destination cannot take (or takes only part of) is
// held and written first when the destination drains: the memory path's
// backpressure, which a stream fast enough to fill a socket never takes
// (it is spliced by then).
func TestLoopHoldsASmallChunkTheDestinationCannotTake(t *testing.T) {
	pair := func() [2]int {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		return fds
	}
	src, dst := pair(), pair()
	if err := unix.SetsockoptInt(dst[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	var want []byte
	for block := bytes.Repeat([]byte{'f'}, 1000); ; {
		n, err := unix.Write(dst[0], block)
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, block[:n]...)
	}
	msg := make([]byte, 3000)
	for i := range msg {
		msg[i] = byte(i)
	}
	if _, err := unix.Write(src[1], msg); err != nil {
		t.Fatal(err)
	}
	want = append(want, msg...)

	l := &loop{buf: make([]byte, 16<<10)}
	c := &loopConn{fd: [2]int32{int32(src[0]), int32(dst[0])}, p: &TCPProxy{}}
	l.pump(c, 0)
	if held := len(c.dir[0].pend); held == 0 {
		t.Fatalf("nothing held from a chunk written to a full socket (%d bytes written)", c.dir[0].n)
	}
	var got []byte
	buf := make([]byte, 64<<10)
	for range 1000 {
		n, err := unix.Read(dst[1], buf)
		if err != nil && err != unix.EAGAIN {
			t.Fatal(err)
		}
		got = append(got, buf[:max(n, 0)]...)
		if len(got) >= len(want) {
			break
		}
		l.pump(c, 0) // what the loop does on the destination's EPOLLOUT
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d: the held chunk lost or out of order", len(got), len(want))
	}
	if c.gone() || c.dir[0].held() {
		t.Fatalf("gone %v, still held %v after the destination drained", c.gone(), c.dir[0].held())
	}
}

// A socket closed here whose copy another process holds (the socket
// keeper's) stays in an epoll set, and its descriptor number is the next
// socket's at once: an event of the old socket must not be read as the
// new one's (a hang-up there was a refused connect, or a client gone).
func TestStaleEventsDoNotReachTheNumbersNextSocket(t *testing.T) {
	if err := theLoops(); err != nil {
		t.Fatal(err)
	}
	set, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(set)
	pair := func() [2]int {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fds
	}
	register := func(e *loopEntry, fd int) {
		e.newGen()
		byFD[fd].Store(e)
		if err := unix.EpollCtl(set, unix.EPOLL_CTL_ADD, fd, e.event(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLET, int32(fd))); err != nil {
			t.Fatal(err)
		}
	}

	old := pair()
	keeperCopy, err := unix.Dup(old[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keeperCopy)
	var oldEntry, newEntry loopEntry
	register(&oldEntry, old[0])
	byFD[old[0]].Store(nil)
	unix.Close(old[0]) // the keeper's copy keeps it in the set

	next := pair()
	defer unix.Close(next[0])
	defer unix.Close(next[1])
	if next[0] != old[0] && next[1] != old[0] {
		t.Skipf("descriptor %d not reused (got %v)", old[0], next)
	}
	reused := old[0]
	register(&newEntry, reused)
	defer byFD[reused].Store(nil)

	unix.Close(old[1]) // the old socket's peer hangs up
	events := make([]unix.EpollEvent, 8)
	n, err := unix.EpollWait(set, events, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events[:n] {
		if ev.Fd != int32(reused) {
			continue
		}
		if e := lookup(&ev); e == &newEntry {
			t.Fatalf("the old socket's event (%#x) was read as the new socket's, which has the number %d now", ev.Events, reused)
		}
	}
	if n == 0 {
		t.Fatal("no event of the old socket: the test shows nothing")
	}
}
