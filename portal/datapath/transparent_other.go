//go:build !linux

package datapath

import (
	"errors"
	"syscall"
)

// transparentControl: dialing from a client's address needs Linux's
// IP_TRANSPARENT; elsewhere the dial fails and the node's address is used.
func transparentControl(string, string, syscall.RawConn) error {
	return errors.New("dialing from the client's address needs Linux (IP_TRANSPARENT)")
}
