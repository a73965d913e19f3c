package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCommand(os.Args[2:])
	case "cleanup":
		err = cleanupCommand(os.Args[2:])
	case "watch":
		err = watchCommand(os.Args[2:], os.Stdout)
	case "chaos":
		err = chaosCommand(os.Args[2:], os.Stdout)
	case "version", "--version":
		fmt.Println("kproxy", version)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "kproxy: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kproxy:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `kproxy: a userspace Kubernetes service proxy

Commands:
  run      watch a source and proxy its services (kproxy run --help)
  watch    print the node-local view as JSON on every change, or run a callout (kproxy watch --help)
  cleanup  remove every kernel portal rule kproxy owns (kproxy cleanup --help)
  chaos    drive a running kproxy's fault-injection API (kproxy chaos --help)
  version  print the version
`)
}
