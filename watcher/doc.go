// Package watcher turns Kubernetes Services and EndpointSlices into kproxy's
// node-local model: one messages.ServicePortEndpoints per service port, with
// the endpoints already filtered the way kube-proxy and KPNG filter them for
// this node (readiness, terminating fallback, traffic policies, local flag).
//
// The translation (nodelocal.go, endpoints.go, validate.go, ipset.go) takes
// typed API objects so every source shares it: the file source here
// (file.go, decode.go, findings.go, poll.go) and a later Kubernetes-informer
// source.
package watcher
