package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/watcher"
)

// hollowCores is the core of a hollow round: one, or replicas on
// protoactor's cluster (automanaged over loopback) in this process, each
// following the same objects with its own watcher.Objects.
type hollowCores struct {
	cores []*remote.Core
	views []*hollowViews
}

// startHollowCores starts n cores (n > 1: replicas of one cluster) and
// returns once each counts all of them as members.
func startHollowCores(ctx context.Context, n int, heartbeat time.Duration) (*hollowCores, error) {
	h := &hollowCores{}
	var health []string
	if n > 1 {
		for range n {
			addr, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("a replica's health address: %w", err)
			}
			health = append(health, addr)
		}
	}
	for i := range n {
		v := &hollowViews{Objects: watcher.NewObjects(watcher.Options{}, zerolog.Nop())}
		cfg := remote.CoreConfig{Views: v, Remote: remote.Config{Listen: "127.0.0.1:0"}, Log: hollowLog(), Heartbeat: heartbeat}
		if n > 1 {
			p, err := remote.Automanaged(health[i], health, 200*time.Millisecond)
			if err != nil {
				h.stop()
				return nil, err
			}
			cfg.Replicas = &remote.Replicas{Name: "hollow", Provider: p}
		}
		core, err := remote.StartCore(ctx, cfg)
		if err != nil {
			h.stop()
			return nil, fmt.Errorf("start core %d: %w", i, err)
		}
		h.cores, h.views = append(h.cores, core), append(h.views, v)
	}
	// Backends placed before the replicas know each other would all be
	// placed on the first, then moved.
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, c := range h.cores {
		if err := c.WaitMembers(wait, n); err != nil {
			h.stop()
			return nil, fmt.Errorf("%d core replicas did not find each other: %w", n, err)
		}
	}
	return h, nil
}

// send hands an event to every core.
func (h *hollowCores) send(e watcher.Event) {
	for _, v := range h.views {
		v.send(e)
	}
}

// addresses is what a hollow node subscribes to.
func (h *hollowCores) addresses() string {
	var out []string
	for _, c := range h.cores {
		out = append(out, c.Address())
	}
	return strings.Join(out, ",")
}

// deltas and snapshots sent by all cores so far.
func (h *hollowCores) counts() (deltas, snapshots int64) {
	for _, c := range h.cores {
		deltas += c.Counters().Deltas.Load()
		snapshots += c.Counters().Snapshots.Load()
	}
	return deltas, snapshots
}

func (h *hollowCores) stop() {
	for _, c := range h.cores {
		c.Stop()
	}
}
