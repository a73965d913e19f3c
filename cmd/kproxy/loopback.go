package main

import (
	"fmt"
	"net"
)

// loopbackAddress reports whether the host of addr ("host:port", the value
// of flagName) is loopback: localhost or a loopback IP. A host that is no
// IP is not loopback.
func loopbackAddress(flagName, addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%s %q: %w", flagName, addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
