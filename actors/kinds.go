package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/balancer"
)

// spawnProps are the Props of rec's actor of role (roleServicePort or a
// child's): supervised as every kproxy actor, and made with rec, so every
// incarnation, the first and each one a restart makes, holds the record
// it acts for from its construction. This is the one place a record is
// handed to actors; their configuration and its changes then arrive as
// messages.
func (c *Config) spawnProps(rec *record, role string) *actor.Props {
	var produce actor.Producer
	switch role {
	case roleServicePort:
		produce = func() actor.Actor { return &ServicePort{cfg: c, rec: rec} }
	case rolePortal:
		produce = func() actor.Actor { return &Portal{cfg: c, rec: rec} }
	case roleBalancer:
		produce = func() actor.Actor {
			return &Balancer{cfg: c, rec: rec, scopes: balancer.NewScopes(nil), outliers: balancer.NewOutliers(c.Outliers)}
		}
	default:
		produce = func() actor.Actor { return &Affinity{cfg: c, rec: rec} }
	}
	return c.propsFor(produce)
}
