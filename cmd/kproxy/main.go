package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		reexecWithSysmonSetting() // before anything else: the process starts over
	}
	os.Exit(kproxyMain(os.Args[1:], os.Stdout))
}

// kproxyMain runs one command and returns the exit code: 0 also for
// --help of any command, 2 for an unknown command.
func kproxyMain(args []string, stdout io.Writer) int {
	if len(args) < 1 {
		usage()
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runCommand(args[1:])
	case "cleanup":
		err = cleanupCommand(args[1:])
	case "watch":
		err = watchCommand(args[1:], stdout)
	case "chaos":
		err = chaosCommand(args[1:], stdout)
	case "setup-node":
		err = setupNodeCommand(args[1:], stdout)
	case "check-ready":
		err = checkReadyCommand(args[1:], stdout)
	case "keep-sockets":
		err = keepSocketsCommand(args[1:], stdout)
	case "bench":
		// The harness is its own binary, so the node agent links none of it.
		fmt.Fprintf(os.Stderr, "kproxy: the benchmark harness is its own binary: run %s\n(make build puts it beside kproxy in bin/; kproxy-bench --help)\n",
			strings.Join(append([]string{"kproxy-bench"}, args[1:]...), " "))
		return 2
	case "version", "--version":
		fmt.Fprintln(stdout, "kproxy", version)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "kproxy: unknown command %q\n", args[0])
		usage()
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0 // usage was printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kproxy:", err)
		return 1
	}
	return 0
}

func usage() {
	fmt.Fprint(os.Stderr, `kproxy: a userspace Kubernetes service proxy

Commands:
  run      watch a source and proxy its services (kproxy run --help)
  watch    print the node-local view as JSON on every change, or run a callout (kproxy watch --help)
  cleanup  remove every kernel portal rule kproxy owns (kproxy cleanup --help)
  chaos    drive a running kproxy's fault-injection API (kproxy chaos --help)
  setup-node  set the node's sysctls (hand-over, connection tracking), then exit (kproxy setup-node --help)
  check-ready  a readiness probe: succeed when kproxy run serves (kproxy check-ready --help)
  keep-sockets  hold kproxy run's listening sockets while it restarts (kproxy keep-sockets --help)
  version  print the version

Benchmarks are a binary of their own: kproxy-bench --help.
`)
}
