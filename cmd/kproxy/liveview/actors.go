package liveview

import (
	"strings"
	"time"
)

// Actor statuses.
const (
	statusRunning    = "running"
	statusRestarting = "restarting" // failed, not answering yet
	statusFailing    = "failing"    // running, but reports failures (listeners, proxy port)
)

// Failure is an actor's last failure.
type Failure struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// actorState is what the live view knows of one actor (by PID id) from the
// supervision events: the actor itself reports nothing of it.
type actorState struct {
	restarts    int
	lastFailure *Failure
	restarting  bool
	lastTook    time.Duration
}

// Actor is one actor as the API shows it.
type Actor struct {
	Role        string   `json:"role"`
	ID          string   `json:"id"`
	Restarts    int      `json:"restarts"`
	LastFailure *Failure `json:"lastFailure,omitempty"`
	Status      string   `json:"status"`
	// LastRestartMs is how long its last restart took: from the failure to
	// the new incarnation answering a message.
	LastRestartMs float64 `json:"lastRestartMs,omitempty"`
}

func (a *actorState) view(role, id string) Actor {
	v := Actor{Role: role, ID: id, Status: statusRunning}
	if a == nil {
		return v
	}
	v.Restarts, v.LastFailure = a.restarts, a.lastFailure
	if a.restarting {
		v.Status = statusRestarting
	}
	v.LastRestartMs = ms(a.lastTook)
	return v
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Roles of a service port's actors, as actors.ServicePortActors names them.
const (
	roleServicePort = "serviceport"
	rolePortal      = "portal"
	roleBalancer    = "balancer"
	roleAffinity    = "affinity"
)

// splitActorID splits the PID id of a service port's actor into the
// ServicePort's PID id and the role: "kproxy/proxier/<sp>/portal" is
// ("kproxy/proxier/<sp>", "portal"), "kproxy/proxier/<sp>" is (itself,
// "serviceport"). ok is false for the top actors.
func splitActorID(id, proxierID string) (servicePortActor, role string, ok bool) {
	rest, found := strings.CutPrefix(id, proxierID+"/")
	if !found || rest == "" {
		return "", "", false
	}
	name, child, hasChild := strings.Cut(rest, "/")
	if !hasChild {
		return id, roleServicePort, true
	}
	return proxierID + "/" + name, child, true
}
