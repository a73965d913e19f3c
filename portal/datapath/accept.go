package datapath

import (
	"errors"
	"syscall"
)

// isTemporaryAcceptError reports errors after which the listener is still
// good: fd exhaustion and aborted handshakes.
func isTemporaryAcceptError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
