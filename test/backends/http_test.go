package backends

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The HTTP backend closes after its response even when the client would
// keep the connection: the server closes first, whatever it is asked.
func TestHTTPClosesFirst(t *testing.T) {
	h, err := StartHTTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
		"GET /any HTTP/1.1\r\nHost: t\r\n\r\n", // asking for keep-alive
	} {
		c, err := net.Dial("tcp", h.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := io.ReadAll(c) // to the server's close
		c.Close()
		if err != nil {
			t.Fatalf("%q: %v after %q", req, err, resp)
		}
		if r := string(resp); !strings.HasPrefix(r, "HTTP/1.1 200 ") || !strings.HasSuffix(r, "\r\n\r\n"+HTTPBody) {
			t.Errorf("%q: response %q", req, r)
		}
	}
}
