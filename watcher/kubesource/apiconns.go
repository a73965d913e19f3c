package kubesource

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
)

// APIConns dials the API server's connections and keeps them, so a fault
// can break them all under the informers (as a load balancer that drops
// its connections, or an API server restart, does): the watches end with
// an error and client-go re-lists and re-watches on its own.
type APIConns struct {
	dialer net.Dialer
	mu     sync.Mutex
	conns  map[*apiConn]struct{}
}

// NewAPIConns returns a tracker; set its DialContext as rest.Config.Dial.
func NewAPIConns() *APIConns {
	return &APIConns{conns: map[*apiConn]struct{}{}}
}

// DialContext dials and tracks the connection until it is closed.
func (a *APIConns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := a.dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	ac := &apiConn{Conn: c, owner: a}
	a.mu.Lock()
	a.conns[ac] = struct{}{}
	a.mu.Unlock()
	return ac, nil
}

// Break closes every open connection to the API server and says how many
// it closed.
func (a *APIConns) Break() int {
	a.mu.Lock()
	conns := slices.Collect(maps.Keys(a.conns))
	a.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

type apiConn struct {
	net.Conn
	owner *APIConns
	once  sync.Once
}

func (c *apiConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}
