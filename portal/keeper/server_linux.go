//go:build linux

package keeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Options configure a Server.
type Options struct {
	// Hold is how long sockets are kept with no kproxy connected; then
	// they are closed. Zero keeps them until SIGTERM.
	Hold time.Duration
	Log  zerolog.Logger
}

// Server is the keeper: it holds the sockets kproxy gives it.
type Server struct {
	opts Options
	ln   *net.UnixListener

	mu      sync.Mutex
	kept    map[string]*os.File
	conns   map[string]keptConn // by connection ID
	clients int
	// changed is broadcast when clients changes (list waits on it).
	changed  *sync.Cond
	timedOut bool
	idle     *time.Timer
}

// listSettle bounds list's wait for the other connections to end (a
// live process may hold one: a hand-over in the same pod, a test).
const listSettle = 2 * time.Second

// keptConn is a connection held: its listening socket's key and its
// descriptors, raw (an os.File of a non-blocking socket would register it
// in Go's poller and out again: two epoll_ctl per descriptor, six
// descriptors per connection, for descriptors the keeper never reads).
type keptConn struct {
	key string
	fds []int
	// flow, for a UDP flow, is its "CLIENT REPLY" (keeper.go); "" for a
	// TCP connection.
	flow string
}

// Close closes the keeper's copies.
func (c keptConn) Close() {
	for _, fd := range c.fds {
		syscall.Close(fd)
	}
}

// Listen opens the keeper's socket at path (replacing a previous
// keeper's), reachable by its owner only.
func Listen(path string, o Options) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket keeper: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("socket keeper: remove the previous keeper's socket: %w", err)
	}
	old := syscall.Umask(0o077) // its owner's only: kproxy's user alone may hand sockets over
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("socket keeper: %w", err)
	}
	s := &Server{opts: o, ln: ln, kept: map[string]*os.File{}, conns: map[string]keptConn{}}
	s.changed = sync.NewCond(&s.mu)
	return s, nil
}

// Serve serves kproxy's connections until ctx is done, then closes every
// socket kept (the pod is going: kproxy's own close must be the last).
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		s.closeAll("the keeper stops")
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("socket keeper: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

// KeptConns is how many established connections are held.
func (s *Server) KeptConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Kept is how many listening sockets are held.
func (s *Server) Kept() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kept)
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	s.connected(1)
	defer s.connected(-1)
	defer c.Close()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	buf := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(connFiles*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 && oobn == 0 {
			return
		}
		fds := rights(oob[:oobn])
		verb, key, _ := strings.Cut(string(buf[:n]), " ")
		switch {
		case verb == verbKeep && len(fds) == 1:
			s.keep(key, os.NewFile(uintptr(fds[0]), key))
		case verb == verbDrop && len(fds) == 0:
			s.drop(key)
		case verb == verbConn && (len(fds) == 1 || len(fds) == connFiles):
			id, lkey, _ := strings.Cut(key, " ")
			s.keepConn(id, keptConn{key: lkey, fds: fds})
		case verb == verbFlow && len(fds) == 1 && strings.Count(key, " ") == 3:
			id, rest, _ := strings.Cut(key, " ")
			lkey, meta, _ := strings.Cut(rest, " ")
			s.keepConn(id, keptConn{key: lkey, fds: fds, flow: meta})
		case verb == verbUnconn && len(fds) == 0:
			for _, id := range strings.Fields(key) {
				s.dropConn(id)
			}
		case verb == verbList && len(fds) == 0:
			if err := s.list(c); err != nil {
				s.opts.Log.Warn().Err(err).Msg("socket keeper: cannot list the sockets kept")
				return
			}
		default:
			for _, fd := range fds {
				syscall.Close(fd)
			}
			s.opts.Log.Warn().Str("message", verb).Int("fds", len(fds)).Msg("socket keeper: unknown message ignored")
		}
	}
}

func (s *Server) keep(key string, f *os.File) {
	s.mu.Lock()
	old := s.kept[key]
	s.kept[key] = f
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (s *Server) drop(key string) {
	s.mu.Lock()
	f := s.kept[key]
	delete(s.kept, key)
	s.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

func (s *Server) keepConn(id string, c keptConn) {
	s.mu.Lock()
	old, had := s.conns[id]
	s.conns[id] = c
	s.mu.Unlock()
	if had {
		old.Close()
	}
}

func (s *Server) dropConn(id string) {
	s.mu.Lock()
	c, ok := s.conns[id]
	delete(s.conns, id)
	s.mu.Unlock()
	if ok {
		c.Close()
	}
}

// list sends every socket kept, then the end. It first waits (up to
// listSettle) for the other connections to end: a process that died may
// have left messages in its connection (a connection connected), which
// must be read before its successor is told what is kept.
func (s *Server) list(c *net.UnixConn) error {
	// Sent under the lock: a drop cannot close a descriptor being sent.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients > 1 {
		t := time.AfterFunc(listSettle, func() {
			s.mu.Lock()
			s.timedOut = true
			s.changed.Broadcast()
			s.mu.Unlock()
		})
		for s.clients > 1 && !s.timedOut {
			s.changed.Wait()
		}
		t.Stop()
		s.timedOut = false
	}
	for key, f := range s.kept {
		if err := sendFile(c, verbKept+" "+key, f); err != nil {
			return err
		}
	}
	for id, kc := range s.conns {
		msg := verbKeptConn + " " + id + " " + kc.key
		if kc.flow != "" {
			msg = verbKeptFlow + " " + id + " " + kc.key + " " + kc.flow
		}
		if _, _, err := c.WriteMsgUnix([]byte(msg), syscall.UnixRights(kc.fds...), nil); err != nil {
			return err
		}
	}
	_, _, err := c.WriteMsgUnix([]byte(verbEnd), nil, nil)
	return err
}

// connected counts kproxy's connections; with none for Options.Hold, the
// sockets are closed.
func (s *Server) connected(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients += d
	s.changed.Broadcast()
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	if s.clients == 0 && s.opts.Hold > 0 && len(s.kept)+len(s.conns) > 0 {
		s.opts.Log.Warn().Int("sockets", len(s.kept)).Int("connections", len(s.conns)).Dur("hold", s.opts.Hold).Msg("socket keeper: kproxy is gone; holding its sockets for the next one")
		s.idle = time.AfterFunc(s.opts.Hold, func() {
			s.mu.Lock()
			gone := s.clients == 0
			s.mu.Unlock()
			if gone {
				s.closeAll("no kproxy came back within the hold time")
			}
		})
	}
}

func (s *Server) closeAll(why string) {
	s.mu.Lock()
	kept, conns := s.kept, s.conns
	s.kept, s.conns = map[string]*os.File{}, map[string]keptConn{}
	s.mu.Unlock()
	for _, f := range kept {
		f.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	if len(kept)+len(conns) > 0 {
		s.opts.Log.Info().Int("sockets", len(kept)).Int("connections", len(conns)).Str("why", why).Msg("socket keeper: sockets closed")
	}
}

// rights returns the descriptors of the control messages (none if they
// cannot be parsed).
func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// sendFile sends f's descriptor with msg. Not through f.Fd(), which would
// turn the socket (its open file description, shared with kproxy's
// descriptors) blocking under kproxy's event loops.
func sendFile(c *net.UnixConn, msg string, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Control(func(fd uintptr) {
		_, _, werr = c.WriteMsgUnix([]byte(msg), syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}
