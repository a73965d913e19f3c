package faults

import (
	"errors"
	"fmt"
	"time"
)

// SetEndpointFault makes dials to endpoint ("ip:port") fail or stall for d.
// It needs Config.Endpoints.
func (i *Injector) SetEndpointFault(endpoint, mode string, d time.Duration) error {
	if i.cfg.Endpoints == nil {
		return errors.New("endpoint faults: fault injection is not enabled")
	}
	if err := i.cfg.Endpoints.Set(endpoint, mode, d); err != nil {
		return err
	}
	i.inject("endpoint").Str("endpoint", endpoint).Str("mode", mode).Dur("duration", d).Msg("fault injected: endpoint")
	return nil
}

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
// It needs Config.Endpoints.
func (i *Injector) SetListenerFault(servicePort, fault string, d time.Duration) error {
	if i.cfg.Endpoints == nil {
		return errors.New("listener faults: fault injection is not enabled")
	}
	listeners, err := i.p.ServicePortListeners(servicePort)
	if err != nil {
		return err
	}
	switch fault {
	case ListenerFaultBreak:
		n := 0
		for _, l := range listeners {
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
		i.cfg.Endpoints.SetAcceptFault(servicePort, d)
	default:
		return fmt.Errorf("listener fault %q: want %s or %s", fault, ListenerFaultBreak, ListenerFaultEMFILE)
	}
	i.inject("listener").Str("servicePort", servicePort).Str("fault", fault).Dur("duration", d).Msg("fault injected: listener")
	return nil
}
