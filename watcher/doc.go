// Package watcher turns Kubernetes Services and EndpointSlices into kproxy's
// node-local model: one messages.ServicePortEndpoints per service port, with
// the endpoints already filtered the way kube-proxy and KPNG filter them for
// this node (readiness, terminating fallback, traffic policies, local flag,
// topology hints).
//
//   - The translation (nodelocal.go, endpoints.go, topology.go,
//     validate.go, sourceranges.go, ipset.go) takes typed API objects, so
//     every source shares it.
//   - The sources, all incremental, each a View that builds one service on
//     demand and notifies only what changed (events.go). The Kubernetes
//     source is package kubesource: shared informers whose events carry
//     the objects, which its consumer applies to its Objects (objects.go),
//     checked once on arrival. The file source is package filesource: it
//     reloads files and keeps what it read in a Store (store.go). A core
//     serves many nodes from one watch: kubesource.Source and
//     filesource.NodesFileSource are NodeViews (nodes.go). (A backend's
//     source, a core's view over remoting, is actors/remote.Source, a
//     Store too.)
//   - The Tracker (tracker.go) is the one change engine: events are applied
//     to the View and mark services dirty; a flush rebuilds only those, and
//     one comparison with the last flush (diff.go) gives what really
//     changed and whether it waits for pacing.
package watcher
