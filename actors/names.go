package actors

import (
	"strings"

	"github.com/asynkron/protoactor-go/actor"
)

// servicePortPrefix is the name prefix of a ServicePort under the Proxier:
// its key ID with "/" (protoactor's path separator) replaced (recordName
// adds a sequence number).
func servicePortPrefix(id string) string { return strings.ReplaceAll(id, "/", "_") + "-" }

// childID names a child of a ServicePort: "<ServicePort's PID id>/<role>".
// Children are spawned under fixed role names, so siblings and the fault
// injector find them without a PID travelling in messages, and the name
// is the same for every incarnation.
func childID(servicePortID, role string) string { return servicePortID + "/" + role }

// siblingPID is another child of the same ServicePort. By name, not handed
// over: a supervisor's restart makes the new incarnation from the Props
// the child was spawned with, so a sibling spawned later (the Affinity
// actor, once ClientIP affinity is turned on) and told by message would
// be unknown to the Balancer's next incarnation, while its name is the
// same for every incarnation of both.
func siblingPID(ctx actor.Context, role string) *actor.PID {
	parent := ctx.Parent()
	return actor.NewPID(parent.Address, childID(parent.Id, role))
}

// roleOf names the role of an actor by its PID id, for metrics: a
// ServicePort's child by its role name, a ServicePort as "serviceport",
// the top actors by their names.
func roleOf(id string) string {
	parts := strings.Split(strings.TrimPrefix(id, supervisorName+"/"), "/")
	last := parts[len(parts)-1]
	switch {
	case len(parts) >= 3:
		return last // proxier/<service port>/<role>
	case len(parts) == 2 && parts[0] == roleProxier:
		return roleServicePort
	}
	return last
}
