package bench

import (
	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// startProxy starts kproxy's actor tree with a Store as its source and
// returns a function that serves a whole desired state, as a file reload.
func startProxy(cfg actors.Config) (*actors.Proxy, func(...*messages.ServicePortEndpoints)) {
	store := watcher.NewStore()
	cfg.View = store
	p := actors.Start(cfg)
	return p, func(spes ...*messages.ServicePortEndpoints) {
		store.Replace(spes, nil, false)
		p.SourceSynced() // rebuilds every service at once, without the coalescing window
	}
}
