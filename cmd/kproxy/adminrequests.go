package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/portal/datapath"
)

// Bounds of what the admin API accepts: enough for any fault test, not
// enough to keep a node down long after the operator looked away.
const (
	maxChaosRate     = 100 // crashes per second
	maxChaosDuration = 10 * time.Minute
	maxFaultDuration = time.Hour
)

// adminRequest is a POST body: decoded strictly, then checked.
type adminRequest interface{ check() error }

type crashRequest struct {
	ServicePort string `json:"servicePort"`
	Actor       string `json:"actor"`
}

type chaosRequest struct {
	Rate     float64  `json:"rate"`
	Duration string   `json:"duration"`
	Seed     uint64   `json:"seed"`
	Kinds    []string `json:"kinds,omitempty"` // actor kinds to crash; none: portal
	duration time.Duration
}

type endpointFaultRequest struct {
	Endpoint string `json:"endpoint"`
	Mode     string `json:"mode"`
	Duration string `json:"duration"`
	duration time.Duration
}

// rulesFaultRequest fails rule transactions for a duration, or the next
// count of them.
type rulesFaultRequest struct {
	Duration string `json:"duration,omitempty"`
	Count    int    `json:"count,omitempty"`
	duration time.Duration
}

// apiserverFaultRequest breaks the connections to the API server (the
// informers' watches with them).
type apiserverFaultRequest struct {
	Fault string `json:"fault"`
}

func (r *apiserverFaultRequest) check() error {
	if r.Fault != "break" {
		return fmt.Errorf("fault %q: want break", r.Fault)
	}
	return nil
}

// listenerFaultRequest breaks a service port's TCP listeners, or makes
// their accepts fail with EMFILE for a duration.
type listenerFaultRequest struct {
	ServicePort string `json:"servicePort"`
	Fault       string `json:"fault"`
	Duration    string `json:"duration,omitempty"`
	duration    time.Duration
}

func (r *listenerFaultRequest) check() error {
	if r.ServicePort == "" {
		return fmt.Errorf("servicePort is required")
	}
	switch r.Fault {
	case faults.ListenerFaultBreak:
		if r.Duration != "" {
			return fmt.Errorf("a break takes no duration")
		}
		return nil
	case faults.ListenerFaultEMFILE:
		var err error
		r.duration, err = boundedDuration(r.Duration, maxFaultDuration)
		return err
	}
	return fmt.Errorf("fault %q: want %s or %s", r.Fault, faults.ListenerFaultBreak, faults.ListenerFaultEMFILE)
}

// parseAdminRequest decodes one JSON object (unknown fields are errors)
// into req and checks its bounds.
func parseAdminRequest(body []byte, req adminRequest) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("request body: more than one JSON value")
	}
	return req.check()
}

// topActor reports whether actor is crashed without a service port.
func topActor(actor string) bool { return slices.Contains(actors.TopActors, actor) }

func (r *crashRequest) check() error {
	if r.ServicePort == "" && !topActor(r.Actor) {
		return fmt.Errorf("servicePort is required, unless actor is watcher, proxier or rules")
	}
	if r.Actor == "" {
		r.Actor = "portal"
	}
	return nil
}

func (r *chaosRequest) check() error {
	if len(r.Kinds) > 16 {
		return fmt.Errorf("kinds: at most 16")
	}
	if math.IsNaN(r.Rate) || r.Rate <= 0 || r.Rate > maxChaosRate {
		return fmt.Errorf("rate %v: want 0 < rate <= %d crashes per second", r.Rate, maxChaosRate)
	}
	var err error
	r.duration, err = boundedDuration(r.Duration, maxChaosDuration)
	return err
}

func (r *endpointFaultRequest) check() error {
	if _, err := netip.ParseAddrPort(r.Endpoint); err != nil {
		return fmt.Errorf("endpoint %q: want IP:PORT", r.Endpoint)
	}
	if r.Mode != datapath.FaultFail && r.Mode != datapath.FaultStall && r.Mode != datapath.FaultPanic {
		return fmt.Errorf("mode %q: want %s, %s or %s", r.Mode, datapath.FaultFail, datapath.FaultStall, datapath.FaultPanic)
	}
	var err error
	r.duration, err = boundedDuration(r.Duration, maxFaultDuration)
	return err
}

// maxRulesFaultCount bounds a count of failing rule transactions.
const maxRulesFaultCount = 1000

func (r *rulesFaultRequest) check() error {
	if r.Count != 0 || r.Duration == "" {
		if r.Duration != "" || r.Count < 1 || r.Count > maxRulesFaultCount {
			return fmt.Errorf("want a duration, or a count of 1 to %d transactions", maxRulesFaultCount)
		}
		return nil
	}
	var err error
	r.duration, err = boundedDuration(r.Duration, maxChaosDuration)
	return err
}

func boundedDuration(s string, limit time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", s, err)
	}
	if d <= 0 || d > limit {
		return 0, fmt.Errorf("duration %v: want 0 < duration <= %v", d, limit)
	}
	return d, nil
}
