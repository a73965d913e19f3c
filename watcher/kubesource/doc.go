// Package kubesource is kproxy's Kubernetes source: client-go shared
// informers on Services, EndpointSlices and Nodes, as kube-proxy's, whose
// handlers hand each object over in a watcher.Event (source.go), and the
// guards around the API server connection: APIGate holds requests while
// the server is known not to answer (apigate.go), APIConns lets a fault
// break every connection (apiconns.go). What the events carry becomes the
// node-local model in package watcher (watcher.Objects).
package kubesource
