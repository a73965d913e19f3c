// Package messages holds kproxy's protobuf messages, in one Go package
// generated from two files (make generate):
//
//   - model.proto, the node-local model: a ServicePort is one port of one
//     Service as this node sees it, with its Endpoints already filtered for
//     the node (KPNG's api/localv1). Its helpers are in model.go.
//   - protocol.proto, the messages actors exchange: commands, events,
//     requests and answers, and the Failure (a code and its text) a failure
//     carries across an actor boundary.
//
// Actors exchange only these messages, never Go structs.
package messages
