package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// watchOptions are kproxy watch's flags: a source, and where its node-local
// view goes on every change (KPNG's kpng-json and kpng-callout).
type watchOptions struct {
	sourceFlags
	json    bool
	callout string
	log     string
}

func watchCommand(args []string, stdout io.Writer) error {
	var o watchOptions
	fs := flag.NewFlagSet("kproxy watch", flag.ContinueOnError)
	o.sourceFlags.register(fs)
	fs.BoolVar(&o.json, "json", false, "print the node-local state as JSON lines (one per service, a blank line after each state) on every change")
	fs.StringVar(&o.callout, "callout", "", "run this shell command on every change with the JSON lines on its standard input")
	fs.StringVar(&o.log, "log-level", "warn", "log level (logs go to standard error)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if !o.json && o.callout == "" {
		o.json = true
	}
	log, err := newLogger(os.Stderr, o.log, "console")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return watch(ctx, o, stdout, log)
}

// watch emits the state on every change until ctx ends.
func watch(ctx context.Context, o watchOptions, stdout io.Writer, log zerolog.Logger) error {
	var last []byte
	emit := func(state []*messages.ServicePortEndpoints) {
		var buf bytes.Buffer
		for _, line := range watcher.KPNGJSON(state) {
			buf.Write(line)
			buf.WriteByte('\n')
		}
		if bytes.Equal(buf.Bytes(), last) && last != nil {
			return
		}
		last = bytes.Clone(buf.Bytes())
		if o.json {
			stdout.Write(append(buf.Bytes(), '\n'))
		}
		if o.callout != "" {
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", o.callout)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(buf.Bytes()), stdout, os.Stderr
			if err := cmd.Run(); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Str("callout", o.callout).Msg("callout failed")
			}
		}
	}
	src, err := o.newSource(log)
	if err != nil {
		return err
	}
	defer src.Stop()
	// The same coalescing as the Watcher actor: events mark services dirty,
	// and one flush per window rebuilds only those.
	var mu sync.Mutex
	tracker := watcher.NewTracker(src)
	wake := make(chan struct{}, 1)
	if err := src.Start(ctx, func(e watcher.Event) {
		mu.Lock()
		tracker.Mark(e.Service)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before the source was complete
		}
		return err
	}
	mu.Lock()
	tracker.Mark("") // the source is complete: build everything once
	mu.Unlock()
	for {
		mu.Lock()
		ch := tracker.Flush()
		state := tracker.State()
		mu.Unlock()
		for _, err := range ch.Errors {
			log.Warn().Err(err).Msg("service rejected")
		}
		emit(state)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.minSyncPeriod):
		}
	}
}
