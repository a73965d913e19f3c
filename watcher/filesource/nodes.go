package filesource

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/watcher"
)

var _ watcher.NodeViews = (*NodesFileSource)(nil)

// NodesFileSource is the file source for many nodes: it polls and decodes
// the manifests once (a FileSource) and keeps a Store per node that
// ViewFor has been asked for, each rebuilt from the decoded objects on
// every reload with the same rules as a single node's file source (bad
// input keeps that node's previous state). Events name their node.
type NodesFileSource struct {
	fs     *FileSource
	mu     sync.Mutex
	last   *decodedSet
	nodes  map[string]*watcher.Store
	notify func(watcher.Event)
}

// NewNodesFileSource prepares a source for path (as NewFileSource; opts
// give the service proxy name, the node name is each view's).
func NewNodesFileSource(path string, opts watcher.Options, interval time.Duration, log zerolog.Logger) *NodesFileSource {
	opts.NodeName, opts.Zone = "", ""
	n := &NodesFileSource{fs: NewFileSource(path, opts, interval, log), nodes: map[string]*watcher.Store{}}
	n.fs.decoded = n.reload
	return n
}

// Start returns once the manifests have been read once, as FileSource.Start.
func (n *NodesFileSource) Start(ctx context.Context, notify func(watcher.Event)) error {
	n.mu.Lock()
	n.notify = notify
	n.mu.Unlock()
	return n.fs.Start(ctx, func(watcher.Event) {}) // the node stores notify, in reload
}

// Stop ends the poller.
func (n *NodesFileSource) Stop() { n.fs.Stop() }

func (n *NodesFileSource) optionsFor(node string) watcher.Options {
	o := n.fs.opts
	o.NodeName = node
	return o
}

// reload rebuilds every node's store from a new read.
func (n *NodesFileSource) reload(ds *decodedSet) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = ds
	for node, st := range n.nodes {
		r := ds.result(n.optionsFor(node))
		for _, svc := range st.Replace(r.ServicePorts, r.Retain, r.RetainMissing) {
			if n.notify != nil {
				n.notify(watcher.Event{Kind: "File", Service: svc, Node: node})
			}
		}
	}
}

// ViewFor is node's view, created from the last read on first use.
func (n *NodesFileSource) ViewFor(node string) watcher.View {
	n.mu.Lock()
	defer n.mu.Unlock()
	if st, ok := n.nodes[node]; ok {
		return st
	}
	st := watcher.NewStore()
	if n.last != nil {
		r := n.last.result(n.optionsFor(node))
		st.Replace(r.ServicePorts, r.Retain, r.RetainMissing)
	}
	n.nodes[node] = st
	return st
}
