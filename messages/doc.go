// Package messages holds kproxy's protobuf messages, in one Go package
// generated from three files (make generate):
//
//   - model.proto, the node-local model: a ServicePort is one port of one
//     Service as this node sees it, with its Endpoints already filtered for
//     the node (KPNG's api/localv1). Its helpers are in model.go.
//   - protocol.proto, the messages actors exchange: commands, events,
//     requests and answers, the Failure (a code and its text) a failure
//     carries across an actor boundary, and the TraceContext a change
//     carries for tracing (its carrier methods are in tracecontext.go).
//   - remote.proto, the protocol between a core and its backends over
//     protoactor remoting (package actors/remote): Subscribe, Snapshot,
//     Delta, Heartbeat, SubscriptionAck.
//
// Actors exchange only these messages, never Go structs (only a result an
// actor sends itself from work done off it may be one).
package messages
