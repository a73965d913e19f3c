package datapath_test

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/test/netnstest"
)

// A proxy port is the kernel's from the moment it is chosen until its
// Portal listens on it: the node's own outgoing connections and UDP
// sockets take their ports from the same ephemeral range
// (ip_local_port_range), and one that took a port found free and closed
// again made the Portal fail (bind: address already in use). Here, in a
// namespace whose ephemeral range is 64 ports, every port the range has
// left is taken by outgoing connections (and UDP sockets) between the
// allocation and the listen: each proxy port must still open.
func TestProxyPortsNotLostToTheNodesOwnConnections(t *testing.T) {
	ns := netnstest.New(t, "ports")
	const lo, hi = 40000, 40063
	ns.MustRun(t, "sysctl", "-qw", fmt.Sprintf("net.ipv4.ip_local_port_range=%d %d", lo, hi))
	ns.MustDo(t, func() error {
		ls := datapath.NewListeners()
		a := datapath.NewPortAllocator("127.0.0.1", datapath.PortRange{})
		a.Attach(ls, datapath.ModeNftables)
		var owners []*datapath.Sockets
		defer func() {
			for _, o := range owners {
				o.Close()
			}
		}()
		type proxyPort struct {
			network string
			port    int
		}
		var ports []proxyPort
		for i := range 8 {
			network := []string{"tcp", "udp"}[i%2]
			port, err := a.Allocate(network)
			if err != nil {
				return err
			}
			if port < lo || port > hi {
				return fmt.Errorf("proxy port %d outside the ephemeral range %d-%d: the test shows nothing", port, lo, hi)
			}
			ports = append(ports, proxyPort{network, port})
		}

		// The node's own traffic: TCP connections to one destination, each
		// with a source port of its own, until the range has none left;
		// UDP sockets bound to any port, likewise.
		dst, err := net.Listen("tcp", "127.0.0.1:9") // below the range
		if err != nil {
			return err
		}
		defer dst.Close()
		var held []interface{ Close() error }
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		exhausted := func(network string) error {
			for range hi - lo + 2 {
				var c interface{ Close() error }
				var err error
				if network == "tcp" {
					c, err = net.Dial("tcp", dst.Addr().String())
				} else {
					c, err = net.ListenPacket("udp", "127.0.0.1:0")
				}
				if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EADDRINUSE) {
					return nil // the range is spent
				}
				if err != nil {
					return err
				}
				held = append(held, c)
			}
			return fmt.Errorf("%s: more sockets than the ephemeral range has ports", network)
		}
		for _, network := range []string{"tcp", "udp"} {
			if err := exhausted(network); err != nil {
				return err
			}
		}

		for i, pp := range ports {
			proto := map[string]messages.Protocol{"tcp": messages.Protocol_TCP, "udp": messages.Protocol_UDP}[pp.network]
			specs, err := datapath.ListenSpecs(&messages.ServicePort{Key: &messages.ServicePortKey{Protocol: proto}}, datapath.ModeNftables, "127.0.0.1", pp.port, 0)
			if err != nil {
				return err
			}
			owner := ls.Sockets(fmt.Sprint("owner-", i))
			owners = append(owners, owner)
			if _, err := owner.Open(specs[0]); err != nil {
				return fmt.Errorf("proxy port %s/%d lost between its allocation and its listener: %w", pp.network, pp.port, err)
			}
		}
		return nil
	})
}
