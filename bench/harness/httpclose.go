package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// closeRequestText is the close mode's request: HTTP/1.1 asking the
// server to close after its response, as clients that do not pool
// connections ask.
var closeRequestText = []byte("GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")

// closeRequest: connect, send one HTTP request, read the response until
// the server closes, check it, close.
func (cl *client) closeRequest(addr string) error {
	c, err := net.DialTimeout("tcp", addr, requestTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(requestTimeout))
	return closeExchange(c, cl.buf)
}

// closeExchange sends the request over c and reads the response into buf
// to EOF: a response is whole only when the server has closed, so a
// server (or proxy) that never closes is a timeout, not a success.
func closeExchange(c net.Conn, buf []byte) error {
	if _, err := c.Write(closeRequestText); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	n := 0
	for {
		if n == len(buf) {
			return fmt.Errorf("read response: over %d bytes", len(buf))
		}
		k, err := c.Read(buf[n:])
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read response: %w", err)
		}
	}
	return checkCloseResponse(buf[:n])
}

// checkCloseResponse accepts a 200 whose headers end and whose body is
// as long as its Content-Length says (without one, the body runs to the
// close, as HTTP/1.1 allows): a proxy that cut the response short fails.
func checkCloseResponse(resp []byte) error {
	if len(resp) == 0 {
		return errors.New("no response: closed before a byte")
	}
	line, _, _ := bytes.Cut(resp, []byte("\r\n"))
	if rest, ok := bytes.CutPrefix(line, []byte("HTTP/1.1 200")); !ok || (len(rest) > 0 && rest[0] != ' ') {
		return fmt.Errorf("status %q, want HTTP/1.1 200", line[:min(len(line), 64)])
	}
	head, body, ok := bytes.Cut(resp, []byte("\r\n\r\n"))
	if !ok {
		return fmt.Errorf("truncated: %d bytes, no end of headers", len(resp))
	}
	_, fields, _ := bytes.Cut(head, []byte("\r\n")) // past the status line
	for len(fields) > 0 {
		var h []byte
		h, fields, _ = bytes.Cut(fields, []byte("\r\n"))
		name, value, _ := bytes.Cut(h, []byte(":"))
		if !bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			continue
		}
		want, ok := parseLength(bytes.TrimSpace(value))
		if !ok {
			return fmt.Errorf("content-length %q", value)
		}
		if len(body) < want {
			return fmt.Errorf("truncated: body %d bytes of content-length %d", len(body), want)
		}
		if len(body) > want {
			return fmt.Errorf("body %d bytes, over content-length %d", len(body), want)
		}
	}
	return nil
}

// parseLength is a Content-Length's value: digits only.
func parseLength(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}
