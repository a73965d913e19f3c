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
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/keeper"
)

// keepSocketsCommand runs the socket keeper (portal/keeper): the sidecar
// that holds kproxy's listening sockets while no kproxy runs.
func keepSocketsCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kproxy keep-sockets", flag.ContinueOnError)
	path := fs.String("socket", "", "the unix socket kproxy run --socket-keeper reaches it on, in a volume of the pod's own (required)")
	hold := fs.Duration("hold", time.Minute, "how long the sockets are kept with no kproxy connected (a kproxy that does not come back: refused beats queued forever); 0 keeps them until SIGTERM")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: kproxy keep-sockets --socket FILE [--hold 1m]

Holds a copy of every listening socket of the kproxy run that reaches it
(kproxy run --socket-keeper FILE), so that when kproxy is killed (kill -9,
the OOM killer) its sockets stay open: connections complete into their
backlogs and datagrams queue, and the next kproxy (the kubelet restarts
the container) takes the same sockets back and serves them. Run it beside
kproxy in the same pod, as a sidecar (deploy/daemonset.yaml). On SIGTERM
it closes them and exits.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("keep-sockets: want --socket FILE and nothing else")
	}
	log, err := newLogger(os.Stderr, *level, "json")
	if err != nil {
		return err
	}
	raiseFDLimit(log) // one descriptor per listening socket kept
	s, err := keeper.Listen(*path, keeper.Options{Hold: *hold, Log: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info().Str("socket", *path).Dur("hold", *hold).Msg("socket keeper ready")
	return s.Serve(ctx)
}

// dialKeeper reaches the socket keeper, which a pod starts before kproxy
// (a sidecar) but may still be starting: tried for up to 5 s.
func dialKeeper(ctx context.Context, path string, log zerolog.Logger) (*keeper.Client, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		k, err := keeper.Dial(path, log)
		if err == nil || errors.Is(err, keeper.ErrUnsupported) || time.Now().After(deadline) {
			return k, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond): // a socket file appearing: nothing to wait on
		}
	}
}
