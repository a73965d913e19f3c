package healthcheck

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server is an HTTP server that can stop without failing a request, for
// a listener shared with the next kproxy process (SO_REUSEPORT): the
// health servers and health-check node ports, whose probers must see no
// refusal across a restart. net/http's Shutdown is not enough: a request
// read after it began is dropped unanswered (the connection is closed),
// even on a connection accepted before, so a probe that connected just
// before the hand-over would fail.
type Server struct {
	http    *http.Server
	ln      net.Listener
	stopped atomic.Bool   // Shutdown or Close closed the listener
	done    chan struct{} // Serve returned
	err     error         // what Serve returned, once done

	mu      sync.Mutex
	open    int           // connections not yet closed
	drained chan struct{} // closed when open reaches 0, while Shutdown waits
}

// readHeaderTimeout bounds a client that never sends its request.
const readHeaderTimeout = 10 * time.Second

// Serve serves handler on ln in the background.
func Serve(ln net.Listener, handler http.Handler) *Server {
	s := &Server{ln: ln, done: make(chan struct{})}
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: readHeaderTimeout, ConnState: s.connState}
	go func() {
		s.err = s.http.Serve(ln)
		close(s.done)
	}()
	return s
}

// connState counts the open connections. net/http reports StateNew in
// its accept loop, before it accepts the next one.
func (s *Server) connState(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.open++
	case http.StateClosed, http.StateHijacked:
		s.open--
		if s.open == 0 && s.drained != nil {
			close(s.drained)
			s.drained = nil
		}
	}
}

// Done is closed when the server stopped serving; Err then says why, nil
// when Shutdown or Close stopped it.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is Serve's error once Done is closed, nil after Shutdown or Close.
func (s *Server) Err() error {
	<-s.done
	if s.stopped.Load() {
		return nil
	}
	return s.err
}

// Shutdown stops accepting (the next process's sockets in the group get
// the new connections, and with net.ipv4.tcp_migrate_req those queued
// here), answers every request on the connections it has, each then
// closed, and closes what is left when ctx ends.
func (s *Server) Shutdown(ctx context.Context) {
	// No keep-alive from here: idle connections close now, the others
	// after their answer.
	s.http.SetKeepAlivesEnabled(false)
	s.stopped.Store(true)
	s.ln.Close()
	<-s.done // no connection is accepted any more: the count is final
	s.mu.Lock()
	if s.open == 0 {
		s.mu.Unlock()
		s.http.Close()
		return
	}
	drained := make(chan struct{})
	s.drained = drained
	s.mu.Unlock()
	select {
	case <-drained:
	case <-ctx.Done():
	}
	s.http.Close()
}

// Close closes the listener and every connection at once.
func (s *Server) Close() {
	s.stopped.Store(true)
	s.http.Close()
}
