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

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
)

// DefaultAddress is where the live view listens unless told otherwise.
const DefaultAddress = "127.0.0.1:10261"

// Options say what a live view serves.
type Options struct {
	// Address is the host:port it is served on (the Host check).
	Address string
	Proxy   *actors.Proxy
	// Injector drives the page's crash and storm buttons; nil (fault
	// injection off) leaves the page read-only.
	Injector *faults.Injector
}

// New returns the live view of opts.Proxy as an http.Handler, which
// follows the tree until ctx ends (its event streams end then too). The
// caller serves it on opts.Address.
func New(ctx context.Context, opts Options) (http.Handler, error) {
	host, port, err := net.SplitHostPort(opts.Address)
	if err != nil {
		return nil, fmt.Errorf("--ui-address %q: %w", opts.Address, err)
	}
	if port == "0" {
		port = "" // any: the Host check is about the name
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("live view token: %w", err)
	}
	p := opts.Proxy
	top := map[string]string{"watcher": p.Watcher.GetId(), "proxier": p.Proxier.GetId()}
	if p.RulesPID != nil {
		top["rules"] = p.RulesPID.GetId()
	}
	v := &view{
		opts:  opts,
		ctx:   ctx,
		model: newModel(p.Proxier.GetId(), top, p.Stats()),
		hub:   newHub(),
		guard: &guard{port: port, configured: strings.ToLower(strings.Trim(host, "[]")), token: hex.EncodeToString(raw)},
	}
	stopFollowing := follow(p, v.model, v.hub)
	context.AfterFunc(ctx, stopFollowing)
	// Whatever was reported before the subscription.
	if snap, err := p.State(10 * time.Second); err == nil {
		v.model.seed(snap)
	}
	return v.guard.wrap(v.routes()), nil
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
