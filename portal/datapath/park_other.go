//go:build !linux

package datapath

import (
	"errors"
	"fmt"
)

// parkingSupported: only Linux has the parking set (park_linux.go); here
// every served listener keeps its goroutine.
const parkingSupported = false

func park(l *Listener) error {
	return fmt.Errorf("park %s/%s: %w", l.Spec.Network, l.Spec.Address, errors.ErrUnsupported)
}

func unpark(*Listener) {}
