package datapath

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
)

// PortRange is kube-proxy's --proxy-port-range: "begin-end" or "begin+offset".
// The zero value means "any free port".
type PortRange struct {
	Base, Size int
}

// ParsePortRange parses "30000-30100", "30000+100" or "" (any port).
func ParsePortRange(s string) (PortRange, error) {
	if s == "" {
		return PortRange{}, nil
	}
	var lo, hi int
	var err error
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err = strconv.Atoi(a)
		if err == nil {
			hi, err = strconv.Atoi(b)
		}
	} else if a, b, ok := strings.Cut(s, "+"); ok {
		var off int
		lo, err = strconv.Atoi(a)
		if err == nil {
			off, err = strconv.Atoi(b)
			hi = lo + off
		}
	} else {
		err = errors.New(`want "begin-end" or "begin+offset"`)
	}
	if err != nil {
		return PortRange{}, fmt.Errorf("port range %q: %w", s, err)
	}
	if lo < 1 || hi > 65535 || hi < lo {
		return PortRange{}, fmt.Errorf("port range %q: must lie within 1-65535 with begin <= end", s)
	}
	return PortRange{Base: lo, Size: hi - lo + 1}, nil
}

func (r PortRange) String() string {
	if r.Size == 0 {
		return ""
	}
	return fmt.Sprintf("%d-%d", r.Base, r.Base+r.Size-1)
}

// PortAllocator hands out proxy ports, one per service port, that stay with
// the service port for its life (so kernel rules pointing at them stay valid
// across listener restarts).
//
// A port is taken by opening the socket the Portal will serve on it, and
// that socket is kept (Listeners.reserve) until the Portal takes it over:
// a port found free and closed again can be lost to the node's own
// outgoing connections, whose ephemeral ports come from the same range,
// before the Portal listens on it.
type PortAllocator struct {
	host string
	r    PortRange
	// mode is the portal mode whose proxy-port sockets are opened (see
	// ProxySpec); sockets holds them. Set by Attach.
	mode    string
	sockets *Listeners

	mu sync.Mutex
	// used is per protocol: TCP and UDP ports are separate name spaces, so
	// a TCP and a UDP service port may hold the same number.
	used map[string]map[int]bool
}

// NewPortAllocator allocates ports on host within r (any free port when r
// is zero). Until Attach, the sockets it holds are those of the bind
// portal and are its own.
func NewPortAllocator(host string, r PortRange) *PortAllocator {
	return &PortAllocator{host: host, r: r, sockets: NewListeners(), used: map[string]map[int]bool{"tcp": {}, "udp": {}}}
}

// Attach makes the allocator open the proxy-port sockets of mode and hold
// them in sockets, where the Portals take them over (Listeners.Open).
// Call it before the first allocation.
func (a *PortAllocator) Attach(sockets *Listeners, mode string) {
	a.mu.Lock()
	a.sockets, a.mode = sockets, mode
	a.mu.Unlock()
}

// reserve opens and holds the proxy-port socket of network on port.
func (a *PortAllocator) reserve(network string, port int) error {
	_, err := a.sockets.reserve(ProxySpec(network, a.mode, a.host, port, false))
	return err
}

// unreserve closes the socket reserve held for port, unless a Portal
// took it over.
func (a *PortAllocator) unreserve(network string, port int) {
	a.sockets.unreserve(network, ProxySpec(network, a.mode, a.host, port, false).Address)
}

// ErrPortRangeExhausted means every port of the range is taken.
var ErrPortRangeExhausted = errors.New("proxy port range exhausted")

// Allocate takes a free port for the protocol ("tcp" or "udp") and holds
// its socket until the Portal serving the port takes it over.
func (a *PortAllocator) Allocate(network string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.used[network]
	if used == nil {
		return 0, fmt.Errorf("allocate proxy port: network %q: %w", network, ErrUnsupportedProtocol)
	}
	host, _, _ := net.SplitHostPort(ProxySpec(network, a.mode, a.host, 0, false).Address)
	if a.r.Size == 0 {
		for range 16 {
			// A port no socket holds, from the kernel: asked with
			// SO_REUSEPORT, a UDP socket can be given a port another
			// socket of this user holds (another kproxy process's).
			port, err := probe(network, host, 0)
			if err != nil {
				return 0, fmt.Errorf("allocate proxy port: %w", err)
			}
			if used[port] {
				continue
			}
			if err := a.reserve(network, port); err != nil {
				continue // taken in the meantime: another
			}
			used[port] = true
			return port, nil
		}
		return 0, errors.New("allocate proxy port: kernel keeps returning ports already held")
	}
	start := rand.IntN(a.r.Size)
	for i := range a.r.Size {
		port := a.r.Base + (start+i)%a.r.Size
		if used[port] {
			continue
		}
		// Free for a socket of its own first (no SO_REUSEPORT): the
		// socket kept is opened with it, and would join another kproxy
		// process's port.
		if _, err := probe(network, host, port); err != nil {
			continue
		}
		if err := a.reserve(network, port); err != nil {
			continue
		}
		used[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("allocate proxy port in %s: %w", a.r, ErrPortRangeExhausted)
}

// Claim takes a specific port back, one a previous kproxy process used
// for the same service port (so the kernel rules it left stay right), and
// holds its socket as Allocate does: one with SO_REUSEPORT, beside the
// previous process's while that one still serves. It fails when this
// process holds the port already, when it lies outside the range, or when
// a socket outside kproxy's SO_REUSEPORT group holds it.
func (a *PortAllocator) Claim(network string, port int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.used[network]
	if used == nil || used[port] || port <= 0 || port > 65535 {
		return false
	}
	if a.r.Size > 0 && (port < a.r.Base || port >= a.r.Base+a.r.Size) {
		return false
	}
	if err := a.reserve(network, port); err != nil {
		return false
	}
	used[port] = true
	return true
}

// Release returns a port of the protocol ("tcp" or "udp") to the pool,
// closing its socket if no Portal took it over.
func (a *PortAllocator) Release(network string, port int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.used[network][port] {
		a.unreserve(network, port)
	}
	delete(a.used[network], port)
}

// probe binds and closes host:port, returning the bound port.
func probe(network, host string, port int) (int, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port, nil
	default:
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
}
