package datapath

import "errors"

// ErrNoEndpoints is returned by a Picker when the service port has no usable
// endpoint; the TCP proxy answers with a reset so clients fail fast.
var ErrNoEndpoints = errors.New("no endpoints")

// Picker chooses the endpoint ("ip:port") for a new connection or UDP flow.
// exclude lists endpoints that already failed for this connection, so a
// stale affinity entry or a dead endpoint is skipped.
type Picker interface {
	Pick(clientIP string, exclude []string, external bool) (Pick, error)
	// Dialed reports how a TCP dial to a picked endpoint went (err nil on
	// success), for outlier detection. The TCP proxy reports every failure
	// and a success only when the Pick asked for it.
	Dialed(endpoint string, err error)
}

// PickerNow is a Picker that can tell whether its next Pick answers at
// once, without asking anyone (the event loops' accept dials inline
// only then).
type PickerNow interface {
	Picker
	CanPickNow() bool
}

// Pick is a Picker's choice.
type Pick struct {
	Endpoint string
	// Report asks for the dial's outcome even when it succeeds.
	Report bool
	// AffinityHit is set when ClientIP affinity chose the client's pinned
	// endpoint (for tracing).
	AffinityHit bool
	// Local: the endpoint runs on this node (its replies come back
	// through it, so it can be dialled from the client's address).
	Local bool
}

// PickerFunc adapts a function to a Picker that ignores dial outcomes.
type PickerFunc func(clientIP string, exclude []string, external bool) (string, error)

// Pick implements Picker.
func (f PickerFunc) Pick(clientIP string, exclude []string, external bool) (Pick, error) {
	endpoint, err := f(clientIP, exclude, external)
	return Pick{Endpoint: endpoint}, err
}

// Dialed implements Picker.
func (PickerFunc) Dialed(string, error) {}
