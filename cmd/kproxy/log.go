package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// newLogger builds the one log stream everything writes to (protoactor's
// slog output is routed into it by the actors package).
func newLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: os.Getenv("NO_COLOR") != ""}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// klogWriter turns client-go's klog lines into zerolog events, so informer
// trouble (an API server outage: "Failed to watch ... connection refused")
// shows in the one log stream.
type klogWriter struct{ log zerolog.Logger }

func (w klogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	// Drop klog's own header ("E1122 04:50:00.123456   123 file.go:45] ").
	if _, msg, ok := strings.Cut(line, "] "); ok {
		line = msg
	}
	level := zerolog.InfoLevel
	switch p[0] {
	case 'E', 'F':
		level = zerolog.ErrorLevel
	case 'W':
		level = zerolog.WarnLevel
	}
	w.log.WithLevel(level).Str("component", "client-go").Msg(line)
	return len(p), nil
}

// routeKlog sends client-go's logs to log.
func routeKlog(log zerolog.Logger) {
	klog.LogToStderr(false)
	klog.SetOutput(klogWriter{log})
}
