package watcher

import discoveryv1 "k8s.io/api/discovery/v1"

// Classifier is a NodeViews source that can say which nodes see a service
// alike, so a core builds each distinct view once instead of once per node
// (Objects is one).
type Classifier interface {
	ServiceNames() []string
	Classes(service string) Classes
	// Zone is node's topology.kubernetes.io/zone as the views use it.
	Zone(node string) string
}

// Classes is how one service's view varies between nodes. A node's view
// differs from another's only through its endpoints' Local flags, node
// hints naming it, and its zone when endpoints carry zone hints
// (selectEndpoints is the only place a node enters a build). So:
//   - each node in Nodes (it hosts an endpoint, or a node hint names it)
//     sees the service its own way;
//   - every other node sees it as the other nodes of its zone do when
//     Zoned (some endpoint has zone hints), else as every other node.
//
// It may over-split (a node hosting only an unused endpoint gets its own
// class): that costs a build, never a wrong view.
type Classes struct {
	Nodes map[string]bool
	Zoned bool
}

// Key names the class of a node in zone: nodes with the same key get
// exactly the same view of the service.
func (c Classes) Key(node, zone string) string {
	switch {
	case c.Nodes[node]:
		return "node/" + node + "/" + zone // its zone hints too
	case c.Zoned:
		return "zone/" + zone
	}
	return ""
}

// ownClasses is the classification of a source that cannot tell: every
// node is its own class.
func ownClasses(node string) string { return "node/" + node + "/" }

var _ Classifier = (*Objects)(nil)

// Classes implements Classifier from the service's EndpointSlices.
func (o *Objects) Classes(service string) Classes {
	var c Classes
	so := o.services[service]
	if so == nil {
		return c
	}
	for _, sl := range so.slices {
		for i := range sl.Endpoints {
			c.add(&sl.Endpoints[i])
		}
	}
	return c
}

func (c *Classes) add(e *discoveryv1.Endpoint) {
	if e.NodeName != nil && *e.NodeName != "" {
		c.node(*e.NodeName)
	}
	if e.Hints == nil {
		return
	}
	for _, n := range e.Hints.ForNodes {
		c.node(n.Name)
	}
	if len(e.Hints.ForZones) > 0 {
		c.Zoned = true
	}
}

func (c *Classes) node(name string) {
	if c.Nodes == nil {
		c.Nodes = map[string]bool{}
	}
	c.Nodes[name] = true
}

// Zone implements Classifier: the zone label of the Node last seen.
func (o *Objects) Zone(node string) string { return o.zones[node] }
