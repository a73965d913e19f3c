package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// setupNodeCommand sets the kernel settings kproxy's hand-over relies on
// in the current network namespace, and exits: net.ipv4.tcp_migrate_req=1.
// It is the DaemonSet's init container, the one privileged step: /proc/sys
// is read-only in any container that is not privileged, and a host-network
// pod may not set net.* sysctls through its securityContext. kproxy run
// tries the same at start, and only warns when it cannot.
func setupNodeCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kproxy setup-node", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: kproxy setup-node

Sets net.ipv4.tcp_migrate_req=1 in this network namespace (the node's, in a
host-network pod), so that connections queued on a closing kproxy's sockets
move to its successor's during a hand-over instead of being reset; on a
kernel without it (before 5.14) it says so and succeeds. Needs a writable
/proc/sys: in a pod, a privileged init container (deploy/daemonset.yaml).
`)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("setup-node: unexpected arguments %q", fs.Args())
	}
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
