package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kproxy/kproxy/bench/harness"
)

// hollowHostCommand is the child mode that runs a host of hollow nodes
// for the hollow scenario (harness.ServeHollowHost).
const hollowHostCommand = "hollow-host"

// The hollow scenario's defaults where --services, --churn-rate and
// --duration are not set, as TestHollowNodes's: a round the size of the
// measurements reported, not churn's small one.
const (
	hollowServices = 10000
	hollowRate     = 100
	hollowDuration = 60 * time.Second
)

// hollowFlags are the hollow scenario's own flags; it shares --services,
// --churn-rate and --duration with churn.
type hollowFlags struct {
	nodes, churn, profile *string
	replicas              *int
	heartbeat             *time.Duration
}

func addHollowFlags(fs *flag.FlagSet) hollowFlags {
	return hollowFlags{
		nodes:     fs.String("hollow-nodes", "100", "hollow: node counts, a round each, comma-separated (e.g. 100,1000)"),
		churn:     fs.String("hollow-churn", harness.HollowChurnAll, "hollow: the services changed: all, or alike (only those every node sees alike, to compare a change's cost across node counts)"),
		heartbeat: fs.Duration("hollow-heartbeat", 0, "hollow: the core's heartbeat interval (kproxy watch --serve-heartbeat; 0: its default, 1s)"),
		replicas:  fs.Int("hollow-replicas", 1, "hollow: core replicas serving the nodes (more than one: a protoactor cluster in this process; figures over all of them)"),
		profile:   fs.String("hollow-profile", "", "hollow: write the core's CPU and heap profiles of each round, and each host's CPU profile of the churn and heap after it, to this directory"),
	}
}

// runHollow runs the hollow scenario: its markdown table on stdout, the
// progress of long phases on stderr unless quiet.
func runHollow(hf hollowFlags, o harness.Options, set map[string]bool, quiet bool, stdout io.Writer) error {
	for _, f := range []string{"json", "html"} {
		if set[f] {
			return fmt.Errorf("hollow: --%s: the scenario prints a markdown table only", f)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("this binary's path: %w", err)
	}
	ho := harness.HollowOptions{Services: hollowServices, Rate: hollowRate, Duration: hollowDuration,
		Churn: *hf.churn, Replicas: *hf.replicas, Heartbeat: *hf.heartbeat, ProfileDir: *hf.profile, Host: []string{self, hollowHostCommand}}
	if set["services"] {
		ho.Services = o.Services
	}
	if set["churn-rate"] {
		ho.Rate = o.ChurnRate
	}
	if set["duration"] {
		ho.Duration = o.Duration
	}
	for _, f := range strings.Split(*hf.nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--hollow-nodes %q: %w", f, err)
		}
		ho.Nodes = append(ho.Nodes, n)
	}
	if !quiet {
		ho.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return harness.RunHollow(ctx, ho, stdout)
}
