package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
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
