package datapath

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// With no pipe to be had under the bound, bulk still flows, through
// memory, on either data path.
func TestPipeBoundCopiesThroughMemory(t *testing.T) {
	defer SetMaxPipes(maxPipes.Load())
	SetMaxPipes(1)
	const open = 1 << 20 // as if that many were open: none may be opened
	livePipes.Add(open)
	defer livePipes.Add(-open)
	runtime.GC() // twice: a pool drops what it held before the last two
	runtime.GC()
	if _, err := getPipe(); err != errPipeBound {
		t.Fatalf("a pipe beyond the bound: %v, want %v", err, errPipeBound)
	}

	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	for _, loops := range []bool{false, true} {
		refused := pipeMisses.Load()
		addr := serveTo(t, &TCPProxy{EventLoops: loops}, streamBackend(t, data, len(data)))
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("loops %v: %d of %d bytes, in order %v, %v", loops, len(got), len(data), bytes.Equal(got, data[:len(got)]), err)
		}
		if pipeMisses.Load() == refused {
			t.Fatalf("loops %v: the bulk stream never asked for a pipe", loops)
		}
	}
}
