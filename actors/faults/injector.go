package faults

import (
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/metrics"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// Config is what an Injector drives besides the tree's actors.
type Config struct {
	// Endpoints are the data path's dial and accept faults: the
	// actors.Config.Faults the tree was started with. Nil refuses
	// endpoint and listener faults.
	Endpoints *datapath.Faults
	// Rules sits in front of the kernel rules the tree programs (its
	// actors.Config.Rules). Nil refuses rules faults (bind mode).
	Rules *rules.Faulty
	// Metrics count injected faults; nil means off.
	Metrics *metrics.Metrics
	Log     zerolog.Logger
}

// Prepare makes cfg a tree's configuration that takes faults: the data
// path gets dial and accept faults (cfg.Faults, unless already set), and
// the kernel rules, if any, go through a rules.Faulty. Start the tree with
// cfg, then New with the Proxy and what Prepare returned.
func Prepare(cfg *actors.Config) Config {
	if cfg.Faults == nil {
		cfg.Faults = datapath.NewFaults()
	}
	c := Config{Endpoints: cfg.Faults, Metrics: cfg.Metrics, Log: cfg.Log}
	if cfg.Rules != nil {
		c.Rules = rules.NewFaulty(cfg.Rules)
		cfg.Rules = c.Rules
	}
	return c
}

// Injector injects faults into one running tree. Every fault it injects
// is logged (a warning naming it) and counted. Safe for concurrent use.
type Injector struct {
	p   *actors.Proxy
	cfg Config
	// injected counts the faults injected.
	injected atomic.Int64
	// chaosRunning is set while a storm runs.
	chaosRunning atomic.Bool
}

// New returns an Injector for p, whose configuration went through
// Prepare (which made cfg).
func New(p *actors.Proxy, cfg Config) *Injector { return &Injector{p: p, cfg: cfg} }

// inject counts one fault of kind (crash, endpoint, rules, listener)
// and returns the log event that names it.
func (i *Injector) inject(kind string) *zerolog.Event {
	i.injected.Add(1)
	i.cfg.Metrics.Fault(kind)
	return i.cfg.Log.Warn()
}

// FaultCounts are the totals the state view shows.
type FaultCounts struct {
	FaultsInjected int64 `json:"faultsInjected"`
	Restarts       int64 `json:"restarts"`
}

// Counts returns how many faults were injected and actors restarted
// (whatever failed them).
func (i *Injector) Counts() FaultCounts {
	return FaultCounts{FaultsInjected: i.injected.Load(), Restarts: i.p.Restarts()}
}
