package datapath

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readSome reads from c's socket through r until it returns something
// other than EAGAIN, for at most 5 s.
func readSome(t *testing.T, r *inqReader, c *net.TCPConn, buf []byte) (int, bool, error) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		var more bool
		var rerr error
		rc.Control(func(fd uintptr) { n, more, rerr = r.read(int(fd), buf) })
		if rerr != unix.EAGAIN {
			return n, more, rerr
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing to read after 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// With TCP_INQ a read says whether the socket holds more: bytes, or the
// peer's FIN, which a read that takes the last bytes may have taken too.
func TestInqReadSaysWhatIsLeft(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := a.(*net.TCPConn)
	var r inqReader
	rc, _ := s.SyscallConn()
	rc.Control(func(fd uintptr) {
		for range inqAfter {
			r.smallChunk(int(fd))
		}
	})
	if !r.on {
		t.Skip("TCP_INQ refused: a kernel before 4.18 reads again after every chunk")
	}
	buf := make([]byte, 4)
	c.Write([]byte("a"))
	if n, more, err := readSome(t, &r, s, buf); n != 1 || more || err != nil {
		t.Fatalf("one byte sent: read %d, more %v, %v; want 1, nothing more", n, more, err)
	}
	c.Write([]byte("0123456789"))
	if n, more, err := readSome(t, &r, s, buf); n != 4 || !more || err != nil {
		t.Fatalf("ten bytes sent: read %d, more %v, %v; want 4 and more", n, more, err)
	}
	readSome(t, &r, s, make([]byte, 6))
	c.Write([]byte("bc"))
	c.(*net.TCPConn).CloseWrite() // on loopback both have arrived when it returns
	if n, more, err := readSome(t, &r, s, buf); n != 2 || !more || err != nil {
		t.Fatalf("two bytes and a FIN sent: read %d, more %v, %v; want 2 and more (the FIN)", n, more, err)
	}
	if n, _, err := readSome(t, &r, s, buf); n != 0 || err != nil {
		t.Fatalf("after the FIN: read %d, %v; want the end of the stream", n, err)
	}
}

// A connection that has carried enough chunks to read with TCP_INQ still
// gets the end of the stream when an answer and the FIN come together.
func TestAnswerAndCloseAfterManyExchangesReachTheClient(t *testing.T) {
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bl.Close()
	go func() { // echoes lines; answers "bye" with "goodbye" and closes at once
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					if line == "bye\n" {
						c.Write([]byte("goodbye"))
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	backend := bl.Addr().String()
	p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return backend, nil })}
	go p.Serve(ln.(*net.TCPListener), nil)
	for i := range 50 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		rd := bufio.NewReader(c)
		for range 2 * inqAfter {
			c.Write([]byte("ping\n"))
			if line, err := rd.ReadString('\n'); err != nil || line != "ping\n" {
				t.Fatalf("connection %d: echo %q, %v", i, line, err)
			}
		}
		c.Write([]byte("bye\n"))
		got, err := io.ReadAll(rd)
		c.Close()
		if err != nil || string(got) != "goodbye" {
			t.Fatalf("connection %d: got %q, %v; want the answer, then the end of the stream", i, got, err)
		}
	}
}
