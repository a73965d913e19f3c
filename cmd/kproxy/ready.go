package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/healthcheck"
)

// The ready file is this process's readiness where a probe must reach this
// process and no other. In a hand-over both processes share every port
// (SO_REUSEPORT), so an HTTP probe of the new pod may be answered by the
// old one; a file in the pod's own volume is the new process's alone. The
// DaemonSet's readiness probe runs `kproxy check-ready` on it.

// watchReadyFile keeps path present exactly while r is ready: written
// (whole, by rename) when the process serves its first state, removed
// when it starts draining. A file a previous process left (killed before
// it could remove it) is removed first.
func watchReadyFile(path string, r *healthcheck.Readiness, log zerolog.Logger) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--ready-file: remove the previous process's: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	r.Watch(func(ready bool) {
		var err error
		if ready {
			tmp := path + ".tmp"
			if err = os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err == nil {
				err = os.Rename(tmp, path)
			}
		} else if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
		if err != nil {
			// The probe then says not ready: a rollout waits, the node
			// keeps its previous pod.
			log.Error().Err(err).Str("file", path).Bool("ready", ready).Msg("cannot update the ready file")
		} else if ready {
			log.Info().Str("file", path).Msg("ready: serving every service port of the first state")
		}
	})
	return nil
}

// checkReadyCommand is the readiness probe: it succeeds when the ready
// file is there.
func checkReadyCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("kproxy check-ready", flag.ContinueOnError)
	path := fs.String("ready-file", "", "the file kproxy run --ready-file keeps (required)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: kproxy check-ready --ready-file FILE

Succeeds when the kproxy run that keeps FILE (its --ready-file) serves:
every service port of its source's first state listens and its kernel
rules are programmed, and it is not draining. A DaemonSet's readiness
probe (deploy/daemonset.yaml): unlike /readyz on the shared health port,
it asks this pod's process and no other.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("check-ready: want --ready-file FILE and nothing else")
	}
	if _, err := os.Stat(*path); err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	fmt.Fprintln(stdout, "ready")
	return nil
}
