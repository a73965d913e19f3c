package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/actors/metrics"
	"github.com/kproxy/kproxy/actors/supervision"
	"github.com/kproxy/kproxy/balancer"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/watcher"
)

// DefaultMinSyncPeriod is the Watcher's default minimum interval between
// flushes under sustained changes (a change after a quiet period is
// flushed at once).
const DefaultMinSyncPeriod = 100 * time.Millisecond

// Config is what the tree needs from the command line.
type Config struct {
	// PortalMode is one of portal's modes (datapath.ModeBind by default).
	PortalMode string
	// BindAddress is where proxy-port listeners (and bind-mode node ports) open.
	BindAddress string
	// Ports hands out proxy ports.
	Ports *datapath.PortAllocator
	// UDPIdleTimeout ends idle UDP flows.
	UDPIdleTimeout time.Duration
	// FDLimit is the open-file limit: listeners stop opening (with an
	// error naming it) where they would leave too few fds for the rest.
	// 0 bounds nothing.
	FDLimit int64
	// PickTimeout bounds a connection's wait for the Balancer.
	PickTimeout time.Duration
	Log         zerolog.Logger
	// Faults injects endpoint dial faults and listener accept faults into
	// the data path (package actors/faults drives them); nil (the
	// default) injects none.
	Faults *datapath.Faults
	// Rules programs kernel portal rules (nftables, iptables, netsh); nil
	// in bind mode.
	Rules rules.Interface
	// Conntrack clears UDP conntrack entries the rules made stale; nil
	// clears nothing (bind and netsh modes, tests without a kernel).
	Conntrack rules.Flows
	// View is the source's view (the Kubernetes or the file source); nil
	// means an empty watcher.Store.
	View watcher.View
	// Outliers tunes outlier detection. The zero value means
	// balancer.DefaultOutlierConfig; otherwise ConsecutiveFailures <= 0
	// turns it off.
	Outliers balancer.OutlierConfig
	// Health tracks whether queued changes get applied in time (/healthz);
	// nil means off.
	Health *healthcheck.ProxyHealth
	// Metrics are updated by the actors; nil means off.
	Metrics *metrics.Metrics
	// MeterProvider, when set, receives protoactor's own actor metrics.
	MeterProvider metric.MeterProvider
	// Stats holds per service port traffic counters the data path
	// updates (nil: Start makes one; per service port limits need it).
	Stats *datapath.StatsTable
	// Limits bound TCP connections and UDP flows; nil bounds nothing.
	Limits *datapath.Limits
	// TCPKeepAlive probes both peers of a proxied connection after this
	// long without traffic; 0 turns it off.
	TCPKeepAlive time.Duration
	// Reaper closes idle and half-closed TCP connections; nil closes none.
	Reaper *datapath.IdleReaper
	// TCPEventLoops serves TCP connections that need only their bytes
	// moved on event loops (Linux) instead of goroutines.
	TCPEventLoops bool
	// PodClients, when set, dials every endpoint of a client that is a
	// pod of this node from the pod's address (kernel modes); nil dials
	// from the node's, but for services that preserve the client's.
	PodClients *datapath.PodClients
	// Keeper, when set, holds a copy of every listening socket in another
	// process, so they queue connections while no kproxy runs; sockets
	// it kept from a previous process are taken back (portal/keeper).
	Keeper datapath.SocketKeeper
	// Ready, when set, learns when this process serves its first state:
	// the Proxier marks the service ports listening, the Rules actor its
	// first full sync programmed.
	Ready *healthcheck.Readiness
	// ServiceHealth serves health-check node ports; nil means none.
	ServiceHealth *healthcheck.Services
	// RecoveredPorts are the proxy ports a previous kproxy process used,
	// by service port ID: taken again where still free, so the kernel
	// rules it left (and a successor overlapping with it) stay right.
	RecoveredPorts map[string]ProxyPorts
	// Tracer, when set, traces changes, crashes and (sampled)
	// connections; nil traces nothing.
	Tracer trace.Tracer
	// MinSyncPeriod is the Watcher's minimum interval between flushes
	// once a burst of watcher.DefaultSyncBurst is spent: a change after a
	// quiet period is applied at once, and none waits longer than this.
	MinSyncPeriod time.Duration
	// SourcePaced says the source paces its changes itself (a core's
	// deltas, spaced by the core's own minimum interval): the Watcher
	// applies each at once instead of pacing them a second time.
	SourcePaced bool
	// FirstStateReported, when set, is called once every service port of
	// the source's first state has started and reported (on the
	// Proxier's goroutine: keep it short).
	FirstStateReported func(servicePorts int)

	rulesPID  *actor.PID            // set by Start when Rules is set
	conns     *datapath.ConnTracker // set by Start
	listeners *datapath.Listeners   // set by Start: every open socket by address; records hold their own
	// crashes holds, by PID id, the trace context of an actor's last
	// failure until its next incarnation starts (tracing only).
	crashes *sync.Map
}

// propsFor are the Props of an actor kproxy supervises: restarted by
// supervision.Default, with a mailbox safe to post to while it spawns.
func (c *Config) propsFor(producer actor.Producer) *actor.Props {
	return actor.PropsFromProducer(producer, actor.WithSupervisor(supervision.Default), actor.WithMailbox(spawnSafeMailbox))
}

// ProxyPorts are a service port's proxy ports (External: the second one
// for external traffic under a Local policy, or 0).
type ProxyPorts struct {
	Proxy    int `json:"proxy"`
	External int `json:"external,omitempty"`
}

func (c *Config) defaults() {
	if c.PortalMode == "" {
		c.PortalMode = datapath.ModeBind
	}
	if c.BindAddress == "" {
		c.BindAddress = "0.0.0.0"
	}
	if c.Ports == nil {
		c.Ports = datapath.NewPortAllocator(c.BindAddress, datapath.PortRange{})
	}
	if c.UDPIdleTimeout <= 0 {
		c.UDPIdleTimeout = datapath.DefaultUDPIdleTimeout
	}
	if c.View == nil {
		c.View = watcher.NewStore()
	}
	if c.MinSyncPeriod <= 0 {
		c.MinSyncPeriod = DefaultMinSyncPeriod
	}
	if c.PickTimeout <= 0 {
		c.PickTimeout = 2 * time.Second
	}
	if c.Stats == nil {
		c.Stats = datapath.NewStatsTable()
	}
	if c.Outliers == (balancer.OutlierConfig{}) {
		c.Outliers = balancer.DefaultOutlierConfig
	}
}
