//go:build !linux

package datapath

import (
	"errors"
	"net/netip"
)

// lookupEndpointLink: transparent dialling is Linux-only.
func lookupEndpointLink(netip.Addr) (endpointLink, error) {
	return endpointLink{}, errors.New("transparent dialling needs Linux")
}
