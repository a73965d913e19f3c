package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kproxy/kproxy/bench/harness"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(benchMain(os.Args[1:], os.Stdout)) }

// benchMain runs one command and returns the exit code: 0 also for
// --help.
func benchMain(args []string, stdout io.Writer) int {
	var err error
	switch {
	case len(args) == 2 && args[0] == "relay": // the harness's own UDP relay process
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		err = harness.ServeRelay(ctx, args[1])
	case len(args) == 1 && args[0] == hollowHostCommand: // a host of the hollow scenario's nodes, its child process
		err = harness.ServeHollowHost(os.Stdin, stdout, nil)
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		fmt.Fprintln(stdout, "kproxy-bench", version)
	default:
		err = benchCommand(args, stdout)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0 // usage was printed
	case err != nil:
		fmt.Fprintln(os.Stderr, "kproxy-bench:", err)
		return 1
	}
	return 0
}
