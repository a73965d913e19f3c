package watcher

import "context"

// NodeViews is a source that serves many nodes from one watch, as a core
// (kproxy watch --serve) does: ViewFor builds any node's node-local view
// (its endpoints Local, topology hints for its zone) from the same caches.
// Its events name the node when only one node's view changed (a Node
// object); otherwise every node's.
type NodeViews interface {
	Start(ctx context.Context, notify func(Event)) error
	Stop()
	ViewFor(node string) View
}
