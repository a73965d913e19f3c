package datapath

import (
	"net"
	"testing"
)

// namedBackend answers each connection with its name and closes it.
func namedBackend(t *testing.T, name string) string {
	t.Helper()
	return streamBackend(t, []byte(name), len(name))
}

// streamBackend sends data to each client in turn, write bytes per
// write, then closes the connection.
func streamBackend(t *testing.T, data []byte, write int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			for b := data; len(b) > 0; b = b[min(write, len(b)):] {
				if _, err := c.Write(b[:min(write, len(b))]); err != nil {
					break
				}
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}
