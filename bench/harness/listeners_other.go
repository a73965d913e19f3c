//go:build !linux

package harness

import (
	"context"
	"errors"
	"time"
)

// watchListeners needs Linux's /proc/net/tcp; elsewhere startup reports
// the probes' first accepted connection instead.
func watchListeners(ctx context.Context, addrs []string, start time.Time, onAll func()) (*listenWatch, error) {
	return nil, errors.New("listening sockets are read from /proc/net/tcp (Linux)")
}
