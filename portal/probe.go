package portal

import (
	"net"
	"time"
)

// ProbeTimeout bounds a probe's dial: longer than a connection's first
// attempt (250 ms), as an endpoint that answers within a second is
// reached by a connection's later attempts.
const ProbeTimeout = time.Second

// Probe dials endpoint ("ip:port") over TCP once and closes the connection:
// outlier detection's check, off any client's path, that an ejected
// endpoint answers again. Injected faults apply, as to connections.
func Probe(endpoint string, faults *Faults) error {
	if err := faults.Before(endpoint, ProbeTimeout); err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", endpoint, ProbeTimeout)
	if err != nil {
		return err
	}
	return c.Close()
}
