package steer

import (
	"errors"
	"fmt"

	"github.com/kproxy/kproxy/messages"
)

// ErrUnsupportedProtocol is returned for protocols a userspace proxy cannot
// carry: such a service port gets neither rules nor listeners.
var ErrUnsupportedProtocol = errors.New("protocol not supported by the userspace proxy")

// Network maps a service protocol to a Go network name, the protocol of a
// rule and of the socket it redirects to.
func Network(p messages.Protocol) (string, error) {
	switch p {
	case messages.Protocol_TCP:
		return "tcp", nil
	case messages.Protocol_UDP:
		return "udp", nil
	default:
		return "", fmt.Errorf("%s: %w", p, ErrUnsupportedProtocol)
	}
}
