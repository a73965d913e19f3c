package actors

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kproxy/kproxy/messages"
)

// Listener faults that look like real ones, for a service port's TCP
// listeners: a socket broken under the Portal, and accepts failing with
// EMFILE for a while.
const (
	ListenerFaultBreak  = "break"
	ListenerFaultEMFILE = "emfile"
)

// SetListenerFault injects a listener fault into servicePort: "break"
// shuts its TCP listening sockets down under their serving goroutines
// (the Portal fails, is restarted and opens them again); "emfile" makes
// their accepts fail with EMFILE for d (connections wait in the backlog).
// It needs Config.Faults.
func (p *Proxy) SetListenerFault(servicePort, fault string, d time.Duration) error {
	if p.cfg.Faults == nil {
		return errors.New("listener faults: fault injection is not enabled")
	}
	st, err := p.servicePortState(servicePort)
	if err != nil {
		return err
	}
	switch fault {
	case ListenerFaultBreak:
		n := 0
		owner := strings.TrimPrefix(st.GetActorId(), p.Proxier.GetId()+"/") // its record's name
		for _, l := range p.cfg.listeners.Owned(owner) {
			if l.Spec.Network != "tcp" {
				continue
			}
			if err := l.Break(); err != nil {
				return fmt.Errorf("break %s: %w", servicePort, err)
			}
			n++
		}
		if n == 0 {
			return fmt.Errorf("break %s: no TCP listener", servicePort)
		}
	case ListenerFaultEMFILE:
		p.cfg.Faults.SetAcceptFault(servicePort, d)
	default:
		return fmt.Errorf("listener fault %q: want %s or %s", fault, ListenerFaultBreak, ListenerFaultEMFILE)
	}
	p.faults.Add(1)
	p.cfg.Metrics.Fault("listener")
	p.cfg.Log.Warn().Str("servicePort", servicePort).Str("fault", fault).Dur("duration", d).Msg("fault injected: listener")
	return nil
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
