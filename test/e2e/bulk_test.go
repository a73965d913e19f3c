package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// bulkStream is one connection to an echoing backend that writes a
// seeded pseudo-random stream as fast as the proxy takes it and checks
// every byte echoed back: a proxy that lost, repeated or reordered a
// byte (a kill in the middle of a chunk) is caught at that offset. The
// echo's flow control keeps bytes queued in every buffer on the way.
type bulkStream struct {
	conn     net.Conn
	stopping chan struct{}
	wg       sync.WaitGroup
	echoed   atomic.Int64
	err      atomic.Value
}

// bulkLimit bounds a stream's bytes (it stops sooner when told).
const bulkLimit = 4 << 30

func startBulkStream(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), svc string, seed uint64) *bulkStream {
	t.Helper()
	c, err := dial(context.Background(), "tcp", svc)
	if err != nil {
		t.Fatalf("bulk stream: %v", err)
	}
	r := bufio.NewReaderSize(c, 64<<10)
	if _, err := backends.ReadName(r); err != nil {
		t.Fatalf("bulk stream: %v", err)
	}
	b := &bulkStream{conn: c, stopping: make(chan struct{})}
	var written atomic.Int64
	b.wg.Add(2)
	go func() { // the writer
		defer b.wg.Done()
		src := rand.NewChaCha8(seedBytes(seed))
		buf := make([]byte, 256<<10)
		for n := int64(0); n < bulkLimit; n += int64(len(buf)) {
			select {
			case <-b.stopping:
				c.(*net.TCPConn).CloseWrite()
				return
			default:
			}
			src.Read(buf)
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(buf); err != nil {
				b.err.CompareAndSwap(nil, fmt.Sprintf("bulk write after %d bytes: %v", n, err))
				return
			}
			written.Add(int64(len(buf)))
		}
	}()
	go func() { // the checker
		defer b.wg.Done()
		want := rand.NewChaCha8(seedBytes(seed))
		got, exp := make([]byte, 64<<10), make([]byte, 64<<10)
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			m, err := r.Read(got)
			if m > 0 {
				want.Read(exp[:m])
				if i := firstDiff(got[:m], exp[:m]); i >= 0 {
					b.err.CompareAndSwap(nil, fmt.Sprintf("bulk echo differs at byte %d", b.echoed.Load()+int64(i)))
					return
				}
				b.echoed.Add(int64(m))
			}
			if err == io.EOF {
				if b.echoed.Load() != written.Load() {
					b.err.CompareAndSwap(nil, fmt.Sprintf("bulk echo ended after %d of %d bytes", b.echoed.Load(), written.Load()))
				}
				return
			}
			if err != nil {
				b.err.CompareAndSwap(nil, fmt.Sprintf("bulk read after %d bytes: %v", b.echoed.Load(), err))
				return
			}
		}
	}()
	return b
}

func seedBytes(seed uint64) (s [32]byte) {
	for i := range s {
		s[i] = byte(seed >> (8 * (i % 8)))
	}
	return s
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// waitEchoed waits until n more bytes came back (the stream flows).
func (b *bulkStream) waitEchoed(t *testing.T, n int64) {
	t.Helper()
	target := b.echoed.Load() + n
	for deadline := time.Now().Add(15 * time.Second); b.echoed.Load() < target; {
		if e := b.err.Load(); e != nil {
			t.Fatalf("bulk stream: %v", e)
		}
		if time.Now().After(deadline) {
			t.Fatalf("bulk stream made no progress in 15 s (%d bytes echoed)", b.echoed.Load())
		}
		time.Sleep(5 * time.Millisecond) // a counter, not an event
	}
}

// stop half-closes the stream, waits for the rest of the echo and the
// end, and returns the bytes checked and the first error ("" none).
func (b *bulkStream) stop() (int64, string) {
	close(b.stopping)
	b.wg.Wait()
	b.conn.Close()
	if e := b.err.Load(); e != nil {
		return b.echoed.Load(), e.(string)
	}
	return b.echoed.Load(), ""
}
