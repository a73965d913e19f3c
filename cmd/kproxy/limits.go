package main

import (
	"flag"
	"time"

	"github.com/kproxy/kproxy/portal/datapath"
)

// limitFlags are the data path's bounds. 0 derives a bound from the fd
// limit (datapath.DefaultLimits); a negative value means no bound.
type limitFlags struct {
	maxConns, maxConnsPerServicePort int64
	maxFlows, maxFlowsPerServicePort int64

	tcpIdleTimeout, tcpHalfCloseTimeout, tcpKeepAlive time.Duration
	tcpEventLoops                                     bool
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.maxConns, "max-connections", 0, "TCP connections proxied at once by the process (HAProxy's global maxconn); 0 derives it from the fd limit, negative means no bound")
	fs.Int64Var(&f.maxConnsPerServicePort, "max-connections-per-service-port", 0, "TCP connections proxied at once by one service port; 0 means half the process bound, negative no bound")
	fs.Int64Var(&f.maxFlows, "max-udp-flows", 0, "UDP flows (client addresses) held at once by the process; 0 derives it from the fd limit, negative means no bound")
	fs.DurationVar(&f.tcpIdleTimeout, "tcp-idle-timeout", datapath.DefaultTCPIdleTimeout, "close a proxied TCP connection after this long without a byte either way (Envoy's TCP proxy: 1h); 0 never")
	fs.DurationVar(&f.tcpHalfCloseTimeout, "tcp-half-close-timeout", datapath.DefaultTCPHalfCloseTimeout, "the same once one side has closed its half (HAProxy's timeout client-fin); 0 uses --tcp-idle-timeout")
	fs.DurationVar(&f.tcpKeepAlive, "tcp-keepalive", datapath.DefaultTCPKeepAlive, "probe both peers of a proxied connection after this long without traffic, so vanished hosts are noticed; 0 turns it off")
	fs.BoolVar(&f.tcpEventLoops, "tcp-event-loops", datapath.EventLoopsSupported, "move TCP connections on event loops over epoll (Linux), a few per process, instead of two goroutines per connection; connections that are traced, dialed transparently, sent a PROXY header or given injected faults use goroutines either way")
	fs.Int64Var(&f.maxFlowsPerServicePort, "max-udp-flows-per-service-port", 0, "UDP flows held at once by one service port; 0 means half the process bound, negative no bound")
}

// limits resolves the flags against the fd limit nofile.
func (f limitFlags) limits(nofile int64) *datapath.Limits {
	l := datapath.DefaultLimits(nofile)
	pick := func(flag, derived int64) int64 {
		switch {
		case flag > 0:
			return flag
		case flag < 0:
			return 0 // no bound
		}
		return derived
	}
	l.MaxConns = pick(f.maxConns, l.MaxConns)
	l.MaxFlows = pick(f.maxFlows, l.MaxFlows)
	l.ConnsPerServicePort = pick(f.maxConnsPerServicePort, max(1, l.MaxConns/2))
	l.FlowsPerServicePort = pick(f.maxFlowsPerServicePort, max(1, l.MaxFlows/2))
	if l.MaxConns == 0 && f.maxConnsPerServicePort == 0 {
		l.ConnsPerServicePort = 0
	}
	if l.MaxFlows == 0 && f.maxFlowsPerServicePort == 0 {
		l.FlowsPerServicePort = 0
	}
	return l
}

// reaper is the idle reaper of the flags, or nil when both timeouts are 0.
func (f limitFlags) reaper() *datapath.IdleReaper {
	if f.tcpIdleTimeout <= 0 && f.tcpHalfCloseTimeout <= 0 {
		return nil
	}
	return &datapath.IdleReaper{IdleTimeout: f.tcpIdleTimeout, HalfCloseTimeout: f.tcpHalfCloseTimeout}
}
