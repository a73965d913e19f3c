package actors

import "github.com/asynkron/protoactor-go/actor"

// childID names a child of a ServicePort: "<ServicePort's PID id>/<role>".
// Children are spawned under fixed role names, so siblings, the fault
// injector and the listener registry find them without a PID travelling
// in messages, and the name is the same for every incarnation.
func childID(servicePortID, role string) string { return servicePortID + "/" + role }

// siblingPID is another child of the same ServicePort.
func siblingPID(ctx actor.Context, role string) *actor.PID {
	parent := ctx.Parent()
	return actor.NewPID(parent.Address, childID(parent.Id, role))
}
