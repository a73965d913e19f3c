// Package filesource is kproxy's file source (--source file:PATH):
// manifests written as a user would kubectl apply them, reloaded when they
// change (poll.go: polling, directory notification, kernel leases and
// close-write events for writers still writing), read and checked
// (file.go, decode.go, findings.go; plain YAML without the YAML parser,
// simpleyaml.go, docsplit.go), and kept in a watcher.Store whose changed
// services its events name. NodesFileSource serves every node's view for
// a core (nodes.go).
package filesource
