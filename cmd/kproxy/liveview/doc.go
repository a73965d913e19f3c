// Package liveview serves kproxy run's live view (--ui-address): one web
// page, embedded in the binary, that shows the actor tree as it is now,
// each service port's listeners, endpoints and traffic, and a stream of
// supervision events and applied changes (server-sent events).
//
// It keeps its own view of the tree, fed by what the tree publishes (every
// ServicePortState the Proxier records, every SupervisorEvent), so a page
// of 50 service ports out of 10,000 costs a filter over sorted ids, never
// a round trip through the Proxier. With fault injection on, the page's
// buttons crash actors and start storms through the faults.Injector,
// behind the checks in guard.go.
package liveview
