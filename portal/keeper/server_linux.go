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
	clients int
	idle    *time.Timer
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
	return &Server{opts: o, ln: ln, kept: map[string]*os.File{}}, nil
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

// Kept is how many sockets are held.
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
	oob := make([]byte, syscall.CmsgSpace(4*4))
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

// list sends every socket kept, then the end.
func (s *Server) list(c *net.UnixConn) error {
	// Sent under the lock: a drop cannot close a descriptor being sent.
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, f := range s.kept {
		if err := sendFile(c, verbKept+" "+key, f); err != nil {
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
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	if s.clients == 0 && s.opts.Hold > 0 && len(s.kept) > 0 {
		s.opts.Log.Warn().Int("sockets", len(s.kept)).Dur("hold", s.opts.Hold).Msg("socket keeper: kproxy is gone; holding its sockets for the next one")
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
	kept := s.kept
	s.kept = map[string]*os.File{}
	s.mu.Unlock()
	for _, f := range kept {
		f.Close()
	}
	if len(kept) > 0 {
		s.opts.Log.Info().Int("sockets", len(kept)).Str("why", why).Msg("socket keeper: sockets closed")
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
