package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
)

// setupNodeCommand sets the kernel settings kproxy's hand-over relies on
// in the current network namespace, net.ipv4.tcp_migrate_req=1, and the
// connection tracking kube-proxy sets (--conntrack-*, or the conntrack
// section of --config), and exits.
// It is the DaemonSet's init container, the one privileged step: /proc/sys
// is read-only in any container that is not privileged, and a host-network
// pod may not set net.* sysctls through its securityContext. kproxy run
// tries the same at start, and only warns when it cannot.
func setupNodeCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kproxy setup-node", flag.ContinueOnError)
	var ct conntrackFlags
	ct.register(fs)
	config := fs.String("config", "", "kproxy run's configuration file: its conntrack section (flags given here win)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: kproxy setup-node [--config FILE] [--conntrack-* ...]

Sets net.ipv4.tcp_migrate_req=1 in this network namespace (the node's, in a
host-network pod), so that connections queued on a closing kproxy's sockets
move to its successor's during a hand-over instead of being reset; on a
kernel without it (before 5.14) it says so and succeeds. Then sets the
node's connection tracking as kube-proxy does (the --conntrack-* flags,
kube-proxy's defaults, or the conntrack section of --config). Needs a
writable /proc/sys: in a pod, a privileged init container
(deploy/daemonset.yaml).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("setup-node: unexpected arguments %q", fs.Args())
	}
	if *config != "" {
		values, _, err := loadConfig(*config)
		if err != nil {
			return fmt.Errorf("setup-node: %w", err)
		}
		for name := range values { // kproxy run's other settings are not setup-node's
			if fs.Lookup(name) == nil {
				delete(values, name)
			}
		}
		if err := applyConfig(fs, values); err != nil {
			return fmt.Errorf("setup-node: %w", err)
		}
	}
	if err := ct.validate(); err != nil {
		return fmt.Errorf("setup-node: %w", err)
	}
	if err := setupMigrateReq(stdout); err != nil {
		return err
	}
	changed, missing, err := applySysctls("/proc/sys", ct.settings(runtime.NumCPU()))
	for _, c := range changed {
		fmt.Fprintf(stdout, "kproxy setup-node: %s\n", c)
	}
	if len(missing) > 0 {
		fmt.Fprintf(stdout, "kproxy setup-node: no connection tracking in this kernel yet (nf_conntrack not loaded): %s left alone\n", strings.Join(missing, ", "))
	}
	if err != nil {
		return fmt.Errorf("setup-node: connection tracking: %w (a container needs to be privileged to write /proc/sys)", err)
	}
	return nil
}

// setupMigrateReq sets net.ipv4.tcp_migrate_req=1 and says what it did.
func setupMigrateReq(stdout io.Writer) error {
	changed, err := setMigrateReq()
	switch {
	case errors.Is(err, errNoMigrateReq):
		fmt.Fprintf(stdout, "kproxy setup-node: %v: connections queued on a closing listener are reset during a hand-over\n", err)
		return nil
	case err != nil:
		return fmt.Errorf("setup-node: set net.ipv4.tcp_migrate_req=1: %w (a container needs to be privileged to write /proc/sys)", err)
	case changed:
		fmt.Fprintln(stdout, "kproxy setup-node: net.ipv4.tcp_migrate_req=1")
	default:
		fmt.Fprintln(stdout, "kproxy setup-node: net.ipv4.tcp_migrate_req=1 already")
	}
	return nil
}
