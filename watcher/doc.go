// Package watcher turns Kubernetes Services and EndpointSlices into kproxy's
// node-local model: one messages.ServicePortEndpoints per service port, with
// the endpoints already filtered the way kube-proxy and KPNG filter them for
// this node (readiness, terminating fallback, traffic policies, local flag,
// topology hints).
//
//   - The translation (nodelocal.go, endpoints.go, validate.go, ipset.go)
//     takes typed API objects, so both sources share it.
//   - Two sources, both incremental: KubeSource (kube.go) watches the API
//     server with shared informers; FileSource (poll.go; file.go, decode.go
//     and findings.go read and check the manifests) reloads files and keeps
//     what it read in a Store (store.go). Each is a View that builds one
//     service on demand, and each notifies only the services that changed.
//   - The Tracker (tracker.go) is the one change engine: notifications mark
//     services dirty; a flush rebuilds only those from the View and returns
//     only the service ports that really changed.
//   - kpngjson.go prints the view in the shape of KPNG's kpng-json.
package watcher
