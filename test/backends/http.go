package backends

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
)

// HTTPBody is what an HTTP backend answers every request with.
const HTTPBody = "ok\n"

// HTTP is an HTTP/1.1 backend that answers every request 200 HTTPBody
// and closes the connection after the response: keep-alives are off, so
// the server closes first, as a server answering `Connection: close` does.
type HTTP struct {
	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup
}

// StartHTTP listens on addr ("127.0.0.1:0" for any port).
func StartHTTP(addr string) (*HTTP, error) {
	ln, err := listenConfig.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, HTTPBody)
		}),
		// A benchmark's load can run the process out of fds; the server
		// retries accepting, and its log would only interleave with the
		// harness's output.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv.SetKeepAlivesEnabled(false)
	h := &HTTP{ln: ln, srv: srv}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("http backend %s: %v", ln.Addr(), err)
		}
	}()
	return h, nil
}

// Addr is the backend's "ip:port".
func (h *HTTP) Addr() string { return h.ln.Addr().String() }

// Port is the backend's port.
func (h *HTTP) Port() int { return h.ln.Addr().(*net.TCPAddr).Port }

// Close stops the backend and its connections.
func (h *HTTP) Close() {
	h.srv.Close()
	h.wg.Wait()
}
