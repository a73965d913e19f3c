package faults

import (
	"errors"
	"fmt"
	"time"

	"github.com/kproxy/kproxy/portal/rules"
)

// SetRulesFault makes kernel rule transactions (and presence checks) fail
// for d. It needs Config.Rules (a kernel portal mode).
func (i *Injector) SetRulesFault(d time.Duration) error {
	return i.rulesFault(func(f *rules.Faulty) { f.FailFor(d) }, fmt.Sprintf("for %v", d))
}

// FailRules makes the next n kernel rule transactions fail, as a kernel
// that refuses a change would. It needs Config.Rules.
func (i *Injector) FailRules(n int) error {
	return i.rulesFault(func(f *rules.Faulty) { f.FailNext(n) }, fmt.Sprintf("the next %d transactions", n))
}

func (i *Injector) rulesFault(inject func(*rules.Faulty), what string) error {
	if i.cfg.Rules == nil {
		return errors.New("rules faults: fault injection is not enabled, or the portal mode has no kernel rules")
	}
	inject(i.cfg.Rules)
	i.inject("rules").Str("fault", what).Msg("fault injected: kernel rules")
	// Without a change nothing would try: check now, as the periodic check would.
	i.p.CheckRules()
	return nil
}
