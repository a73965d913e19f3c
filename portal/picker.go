package portal

import "errors"

// ErrNoEndpoints is returned by a Picker when the service port has no usable
// endpoint; the TCP proxy answers with a reset so clients fail fast.
var ErrNoEndpoints = errors.New("no endpoints")

// Picker chooses the endpoint ("ip:port") for a new connection or UDP flow.
// exclude lists endpoints that already failed for this connection, so a
// stale affinity entry or a dead endpoint is skipped.
type Picker interface {
	Pick(clientIP string, exclude []string, external bool) (string, error)
}

// PickerFunc adapts a function to Picker.
type PickerFunc func(clientIP string, exclude []string, external bool) (string, error)

// Pick implements Picker.
func (f PickerFunc) Pick(clientIP string, exclude []string, external bool) (string, error) {
	return f(clientIP, exclude, external)
}
