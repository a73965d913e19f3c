package faults

import "github.com/kproxy/kproxy/messages"

// Crash makes one actor of a service port panic (see actors.Proxy.Crash).
func (i *Injector) Crash(servicePort, role, reason string) error {
	if err := i.p.Crash(servicePort, role, reason); err != nil {
		return err
	}
	i.inject("crash").Str("servicePort", servicePort).Str("actor", role).Str("reason", reason).Msg("fault injected: crash")
	return nil
}

// crashIn is Crash of a service port a storm picked from a snapshot.
func (i *Injector) crashIn(st *messages.ServicePortState, role, reason string) error {
	if err := i.p.CrashIn(st, role, reason); err != nil {
		return err
	}
	i.inject("crash").Str("servicePort", st.GetKey().ID()).Str("actor", role).Str("reason", reason).Msg("fault injected: crash")
	return nil
}

// CrashTop makes one of the top actors (watcher, proxier, rules) panic
// (see actors.Proxy.CrashTop).
func (i *Injector) CrashTop(role, reason string) error {
	if err := i.p.CrashTop(role, reason); err != nil {
		return err
	}
	i.inject("crash").Str("actor", role).Str("reason", reason).Msg("fault injected: crash")
	return nil
}
