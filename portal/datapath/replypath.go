package datapath

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// replyBypassesNode reports whether a node-local endpoint would answer a
// connection dialled from client's address without the reply passing
// through this node's IP stack, where the transparent rules bring it back
// to kproxy's socket: the endpoint is an address of the node itself (a
// host-network pod, whose reply is routed straight out), or client is on
// the endpoint's own link (a pod on the same bridge, which the endpoint
// answers directly), unless that link is a bridge whose replies the bridge
// capture brings up (SetCapturedBridges). Replaced in tests.
var replyBypassesNode = func(client, endpoint netip.Addr) bool {
	l, ok := addrLinks.get(endpoint)
	if !ok {
		return true // unknown: the node's address always works
	}
	if l.node {
		return true
	}
	for _, p := range l.prefixes {
		if p.Contains(client) {
			return !bridgeCaptured(p)
		}
	}
	return false
}

// capturedBridges are the prefixes of the bridges whose frames replying
// to kproxy's connections come up to this node's stack.
var capturedBridges atomic.Pointer[map[netip.Prefix]bool]

// SetCapturedBridges tells the data path the bridge prefixes whose
// replies the bridge capture (portal/rules/bridgecapture) brings up, as
// programmed: a pod client in one is then dialled from its own address
// to an endpoint on its own bridge too.
func SetCapturedBridges(prefixes []netip.Prefix) {
	m := make(map[netip.Prefix]bool, len(prefixes))
	for _, p := range prefixes {
		m[p] = true
	}
	capturedBridges.Store(&m)
}

func bridgeCaptured(p netip.Prefix) bool {
	m := capturedBridges.Load()
	return m != nil && (*m)[p]
}

// endpointLink is where the node reaches an address (an endpoint's, a
// client's): the node itself, or an interface with these on-link
// prefixes, through a gateway or on the link.
type endpointLink struct {
	node     bool
	gateway  bool
	prefixes []netip.Prefix
	at       time.Time
}

// linkCache remembers each address's link for a while: a route lookup per
// connection would cost more than the rest of a dial's setup, and an
// address's link changes only when the node's interfaces and routes do.
type linkCache struct {
	mu sync.Mutex
	m  map[netip.Addr]endpointLink
}

const (
	linkCacheTTL = 10 * time.Second
	linkCacheMax = 4096 // addresses remembered; cleared when full
)

// addrLinks are the links of endpoints and pod clients.
var addrLinks linkCache

func (c *linkCache) get(ep netip.Addr) (endpointLink, bool) {
	now := time.Now()
	c.mu.Lock()
	l, ok := c.m[ep]
	c.mu.Unlock()
	if ok && now.Sub(l.at) < linkCacheTTL {
		return l, true
	}
	l, err := lookupEndpointLink(ep)
	if err != nil {
		return endpointLink{}, false
	}
	l.at = now
	c.mu.Lock()
	if c.m == nil || len(c.m) >= linkCacheMax {
		c.m = make(map[netip.Addr]endpointLink)
	}
	c.m[ep] = l
	c.mu.Unlock()
	return l, true
}
