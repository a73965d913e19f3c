package datapath

import (
	"context"
	"net"
)

// ListenShared listens on a TCP address as the portal sockets do, in
// kproxy's SO_REUSEPORT group (where the platform has one): the next
// kproxy process binds the same address while this one still serves, and
// with net.ipv4.tcp_migrate_req the connections queued here move to it
// when this socket closes. For the operator endpoints and the health-check
// node ports, which a hand-over must keep answering as it keeps the
// service ports.
func ListenShared(ctx context.Context, address string) (net.Listener, error) {
	lc := &net.ListenConfig{Control: reusePort}
	lc.SetMultipathTCP(false)
	return lc.Listen(ctx, "tcp", address)
}
