package actors

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

// Top actors, crashable on their own (no service port).
const (
	roleWatcher = "watcher"
	roleProxier = "proxier"
	roleRules   = "rules"
)

// The actors Crash and CrashTop make panic, by role: a service port's
// (ServicePortActors) and the top of the tree (TopActors).
var (
	ServicePortActors = []string{rolePortal, roleBalancer, roleAffinity, roleServicePort}
	TopActors         = []string{roleWatcher, roleProxier, roleRules}
)

// crashableRoles are the roles of ServicePortActors.
var crashableRoles = map[string]bool{rolePortal: true, roleBalancer: true, roleAffinity: true, roleServicePort: true}

// CrashTop makes one of the top actors (watcher, proxier, rules) panic
// with reason; its supervisor restarts it.
func (p *Proxy) CrashTop(role, reason string) error {
	pid := map[string]*actor.PID{roleWatcher: p.Watcher, roleProxier: p.Proxier, roleRules: p.RulesPID}[role]
	if pid == nil {
		return fmt.Errorf("crash %s: no such actor here (want watcher, proxier, or rules in a kernel portal mode)", role)
	}
	p.System.Root.Send(pid, &messages.InjectCrash{Reason: reason})
	return nil
}

// ErrUnknownServicePort is returned for a service port the Proxier does not have.
var ErrUnknownServicePort = errors.New("unknown service port")

// Crash makes one actor of a service port panic with reason: role is
// portal, balancer, affinity or serviceport. Its parent restarts it.
func (p *Proxy) Crash(servicePort, role, reason string) error {
	if !crashableRoles[role] {
		return fmt.Errorf("crash %s: unknown actor %q (want portal, balancer, affinity or serviceport)", servicePort, role)
	}
	st, err := p.servicePortState(servicePort)
	if err != nil {
		return fmt.Errorf("crash %w", err)
	}
	return p.CrashIn(st, role, reason)
}

// CrashIn is Crash for the service port st is the state of, as State
// returned it: a storm picks among one snapshot's service ports without
// asking the Proxier for each crash.
func (p *Proxy) CrashIn(st *messages.ServicePortState, role, reason string) error {
	servicePort := st.GetKey().ID()
	if !crashableRoles[role] {
		return fmt.Errorf("crash %s: unknown actor %q (want portal, balancer, affinity or serviceport)", servicePort, role)
	}
	if role == roleAffinity && st.GetServicePort().GetSessionAffinity() != messages.SessionAffinity_CLIENT_IP {
		return fmt.Errorf("crash %s: no affinity actor (sessionAffinity is not ClientIP)", servicePort)
	}
	id := st.GetActorId()
	if role != roleServicePort {
		id = childID(id, role)
	}
	p.System.Root.Send(actor.NewPID(p.System.Address(), id), &messages.InjectCrash{Reason: reason})
	return nil
}

// Restarts is how many actor failures the supervisors have handled (each
// one a restart).
func (p *Proxy) Restarts() int64 { return p.restarts.Load() }

// Stats is the per service port traffic counters the data path keeps.
func (p *Proxy) Stats() *datapath.StatsTable { return p.cfg.Stats }

// ServicePortListeners are the sockets servicePort's record holds (its
// Portal serves them); the error wraps ErrUnknownServicePort for a
// service port the Proxier does not have.
func (p *Proxy) ServicePortListeners(servicePort string) ([]*datapath.Listener, error) {
	st, err := p.servicePortState(servicePort)
	if err != nil {
		return nil, err
	}
	owner := strings.TrimPrefix(st.GetActorId(), p.Proxier.GetId()+"/") // its record's name
	return p.cfg.listeners.HeldBy(owner), nil
}

// CheckRules has the Rules actor check the kernel rules now, as its
// periodic check would (kernel portal modes; a no-op in bind mode).
func (p *Proxy) CheckRules() {
	if p.RulesPID != nil {
		p.System.Root.Send(p.RulesPID, &messages.CheckRules{})
	}
}

// servicePortState is the Proxier's state of one service port.
func (p *Proxy) servicePortState(servicePort string) (*messages.ServicePortState, error) {
	snap, err := p.State(5 * time.Second)
	if err != nil {
		return nil, err
	}
	for _, st := range snap.GetServicePorts() {
		if st.GetKey().ID() == servicePort {
			return st, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", servicePort, ErrUnknownServicePort)
}
