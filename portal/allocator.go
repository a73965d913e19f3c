package portal

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
type PortAllocator struct {
	host string
	r    PortRange

	mu sync.Mutex
	// used is per protocol: TCP and UDP ports are separate name spaces, so
	// a TCP and a UDP service port may hold the same number.
	used map[string]map[int]bool
}

// NewPortAllocator allocates ports on host within r (any free port when r is zero).
func NewPortAllocator(host string, r PortRange) *PortAllocator {
	return &PortAllocator{host: host, r: r, used: map[string]map[int]bool{"tcp": {}, "udp": {}}}
}

// ErrPortRangeExhausted means every port of the range is taken.
var ErrPortRangeExhausted = errors.New("proxy port range exhausted")

// Allocate returns a port that is free for the protocol ("tcp" or "udp")
// right now, probing by binding it.
func (a *PortAllocator) Allocate(network string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	used := a.used[network]
	if used == nil {
		return 0, fmt.Errorf("allocate proxy port: network %q: %w", network, ErrUnsupportedProtocol)
	}
	if a.r.Size == 0 {
		for range 16 {
			port, err := probe(network, a.host, 0)
			if err != nil {
				return 0, fmt.Errorf("allocate proxy port: %w", err)
			}
			if !used[port] {
				used[port] = true
				return port, nil
			}
		}
		return 0, errors.New("allocate proxy port: kernel keeps returning ports already held")
	}
	start := rand.IntN(a.r.Size)
	for i := range a.r.Size {
		port := a.r.Base + (start+i)%a.r.Size
		if used[port] {
			continue
		}
		if _, err := probe(network, a.host, port); err != nil {
			continue
		}
		used[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("allocate proxy port in %s: %w", a.r, ErrPortRangeExhausted)
}

// Claim takes a specific port back, one a previous kproxy process used
// for the same service port (so the kernel rules it left stay right). It
// fails when this process holds it already, when it lies outside the
// range, or when a socket outside kproxy's SO_REUSEPORT group holds it.
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
	if err := probeShared(network, a.host, port); err != nil {
		return false
	}
	used[port] = true
	return true
}

// Release returns a port of the protocol ("tcp" or "udp") to the pool.
func (a *PortAllocator) Release(network string, port int) {
	a.mu.Lock()
	delete(a.used[network], port)
	a.mu.Unlock()
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
