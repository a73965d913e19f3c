package datapath

import (
	"fmt"
	"net"
	"time"
)

// ProbeTimeout bounds a probe's dial: long enough for the kernel's first
// SYN retransmission (after 1 s) to be answered, so an endpoint whose
// accept queue was full when the probe's first SYN came is not taken for
// dead.
const ProbeTimeout = 2 * time.Second

// Probe dials endpoint ("ip:port") over TCP once and closes the connection:
// outlier detection's check, off any client's path, that an ejected
// endpoint answers again. Injected faults apply, as to connections.
func Probe(endpoint string, faults *Faults) (err error) {
	defer func() {
		if r := recover(); r != nil { // an injected panic: the probe failed
			err = fmt.Errorf("probe %s: %v", endpoint, r)
		}
	}()
	if err := faults.Before(endpoint, ProbeTimeout); err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", endpoint, ProbeTimeout)
	if err != nil {
		return err
	}
	return c.Close()
}
