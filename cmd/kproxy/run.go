package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal"
	"github.com/kproxy/kproxy/watcher"
)

// runOptions are kproxy run's flags; names follow kube-proxy where it has one.
type runOptions struct {
	source           string
	portalMode       string
	bindAddress      string
	portRange        string
	udpIdleTimeout   time.Duration
	nodeName         string
	serviceProxyName string
	logLevel         string
	logFormat        string
	filePollInterval time.Duration

	enableFaultInjection  bool
	adminAddress          string
	adminAllowNonLoopback bool
}

func runFlags(o *runOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("kproxy run", flag.ContinueOnError)
	hostname, _ := os.Hostname()
	nodeName := os.Getenv("NODE_NAME")
	if nodeName == "" {
		nodeName = hostname
	}
	fs.StringVar(&o.source, "source", "", "where services come from: file:PATH (a YAML/JSON file or directory of Service and EndpointSlice manifests)")
	fs.StringVar(&o.portalMode, "portal", portal.ModeBind, "how traffic reaches the listeners: bind (listen on each service IP:port)")
	fs.StringVar(&o.bindAddress, "bind-address", "0.0.0.0", "address for proxy-port listeners and node ports")
	fs.StringVar(&o.portRange, "port-range", "", `proxy port range "begin-end" or "begin+offset" (empty: any free port)`)
	fs.DurationVar(&o.udpIdleTimeout, "udp-idle-timeout", portal.DefaultUDPIdleTimeout, "how long an idle UDP flow is kept")
	fs.StringVar(&o.nodeName, "node-name", nodeName, "this node's name, for endpoint locality (default $NODE_NAME or the hostname)")
	fs.StringVar(&o.serviceProxyName, "service-proxy-name", "", "serve only services labelled service.kubernetes.io/service-proxy-name=NAME")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "json or console")
	fs.DurationVar(&o.filePollInterval, "file-poll-interval", watcher.DefaultPollInterval, "how often a file source checks for changes")
	fs.BoolVar(&o.enableFaultInjection, "enable-fault-injection", false, "serve the fault-injection admin API (crash actors, chaos, endpoint faults, state) on --admin-address")
	fs.StringVar(&o.adminAddress, "admin-address", DefaultAdminAddress, "address of the admin API; must be loopback unless --admin-allow-non-loopback")
	fs.BoolVar(&o.adminAllowNonLoopback, "admin-allow-non-loopback", false, "allow a non-loopback --admin-address")
	return fs
}

func (o *runOptions) validate() error {
	if o.source == "" {
		return errors.New("--source is required (file:PATH)")
	}
	if !strings.HasPrefix(o.source, "file:") || len(o.source) == len("file:") {
		return fmt.Errorf("--source %q: want file:PATH", o.source)
	}
	if o.portalMode != portal.ModeBind {
		return fmt.Errorf("--portal %q: want %s", o.portalMode, portal.ModeBind)
	}
	if net.ParseIP(o.bindAddress) == nil {
		return fmt.Errorf("--bind-address %q: not an IP address", o.bindAddress)
	}
	if o.udpIdleTimeout <= 0 {
		return fmt.Errorf("--udp-idle-timeout %v: must be positive", o.udpIdleTimeout)
	}
	if o.enableFaultInjection {
		return checkAdminAddress(o.adminAddress, o.adminAllowNonLoopback)
	}
	return nil
}

func runCommand(args []string) error {
	var o runOptions
	fs := runFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	ports, err := portal.ParsePortRange(o.portRange)
	if err != nil {
		return fmt.Errorf("--port-range: %w", err)
	}
	log, err := newLogger(os.Stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, o, ports, log, nil)
}

// run serves until ctx is done, then stops cleanly. started, if set, sees
// the proxy before the source's first snapshot (tests subscribe there).
func run(ctx context.Context, o runOptions, ports portal.PortRange, log zerolog.Logger, started func(*actors.Proxy)) error {
	path := strings.TrimPrefix(o.source, "file:")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	log.Info().Str("version", version).Str("source", o.source).Str("portal", o.portalMode).
		Str("bindAddress", o.bindAddress).Str("nodeName", o.nodeName).Msg("starting kproxy")
	cfg := actors.Config{
		PortalMode:     o.portalMode,
		BindAddress:    o.bindAddress,
		Ports:          portal.NewPortAllocator(o.bindAddress, ports),
		UDPIdleTimeout: o.udpIdleTimeout,
		Log:            log,
	}
	if o.enableFaultInjection {
		cfg.Faults = portal.NewFaults()
	}
	proxy := actors.Start(cfg)
	if o.enableFaultInjection {
		if _, err := startAdmin(ctx, o.adminAddress, proxy, log); err != nil {
			proxy.Stop(context.Background())
			return err
		}
	}
	if started != nil {
		started(proxy)
	}
	opts := watcher.Options{NodeName: o.nodeName, ServiceProxyName: o.serviceProxyName}
	src := watcher.NewFileSource(path, opts, o.filePollInterval, log)
	var generation int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(r *watcher.Result) {
			generation++ // the file source has logged r.Errors
			proxy.Submit(&messages.SourceSnapshot{
				Source: o.source, Generation: generation, ServicePorts: r.ServicePorts,
				RetainServices: r.Retain, RetainMissing: r.RetainMissing,
			})
		})
	}()
	<-ctx.Done()
	<-done
	log.Info().Msg("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := proxy.Stop(stopCtx); err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}
