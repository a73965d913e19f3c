//go:build !linux

package bridgecapture

import (
	"context"
	"errors"

	"github.com/rs/zerolog"
)

// Start fails: bridges and br_netfilter are Linux's.
func Start(context.Context, uint32, func([]Bridge), zerolog.Logger) error {
	return errors.New("bridge capture needs Linux")
}

// Cleanup has nothing to remove.
func Cleanup(context.Context) error { return nil }
