package liveview

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/portal"
)

// DefaultAddress is where the live view listens unless told otherwise.
const DefaultAddress = "127.0.0.1:10261"

// Options say what a live view serves.
type Options struct {
	// Address is host:port to listen on.
	Address string
	Proxy   *actors.Proxy
	// Injector drives the page's crash and storm buttons; nil (fault
	// injection off) leaves the page read-only.
	Injector *faults.Injector
	Log      zerolog.Logger
}

// Server is a running live view.
type Server struct {
	addr   net.Addr
	stop   func()
	closed chan struct{}
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.addr }

// Done is closed once it stopped (ctx ended) and its requests finished.
func (s *Server) Done() <-chan struct{} { return s.closed }

// Start serves the live view of opts.Proxy until ctx ends.
func Start(ctx context.Context, opts Options) (*Server, error) {
	host, _, err := net.SplitHostPort(opts.Address)
	if err != nil {
		return nil, fmt.Errorf("--ui-address %q: %w", opts.Address, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("live view token: %w", err)
	}
	// Shared, as the other operator endpoints: the next kproxy of a
	// hand-over binds it while this one still serves.
	ln, err := portal.ListenShared(ctx, opts.Address)
	if err != nil {
		return nil, fmt.Errorf("live view (--ui-address): %w", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p := opts.Proxy
	top := map[string]string{"watcher": p.Watcher.GetId(), "proxier": p.Proxier.GetId()}
	if p.RulesPID != nil {
		top["rules"] = p.RulesPID.GetId()
	}
	v := &view{
		opts:  opts,
		model: newModel(p.Proxier.GetId(), top, p.Stats()),
		hub:   newHub(),
		guard: &guard{port: port, configured: strings.ToLower(strings.Trim(host, "[]")), token: hex.EncodeToString(raw)},
	}
	stopFollowing := follow(p, v.model, v.hub)
	// Whatever was reported before the subscription.
	if snap, err := p.State(10 * time.Second); err == nil {
		v.model.seed(snap)
	}
	sctx, cancel := context.WithCancel(ctx)
	v.ctx = sctx
	srv := &http.Server{Handler: v.guard.wrap(v.routes()), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return sctx }}
	s := &Server{addr: ln.Addr(), stop: cancel, closed: make(chan struct{})}
	go srv.Serve(ln)
	go func() {
		defer close(s.closed)
		<-sctx.Done()
		stopFollowing()
		// The event streams end with the context; others get a moment.
		shctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		if srv.Shutdown(shctx) != nil {
			srv.Close()
		}
	}()
	opts.Log.Info().Str("address", ln.Addr().String()).Bool("faultButtons", opts.Injector != nil).Msg("serving the live view")
	return s, nil
}

// view is the live view's state shared by its handlers.
type view struct {
	opts  Options
	model *model
	hub   *hub
	guard *guard
	ctx   context.Context
	storm stormState
	// streams counts the open event streams.
	streams atomic.Int64
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
