// Package actorlog sends protoactor's own log (actor failures, dead
// letters, remoting) to kproxy's zerolog logger. It is shared by the node
// proxy's tree (package actors) and the core's and backends' (package
// actors/remote), and depends on neither.
package actorlog

import (
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Option makes an actor system log to log, as component "protoactor".
func Option(log zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(renameMessageAttr{zerolog.NewSlogHandler(log.With().Str("component", "protoactor").Logger())})
	})
}

// renameMessageAttr renames protoactor's "message" attribute, which would
// clash with zerolog's message field.
type renameMessageAttr struct{ slog.Handler }

func (h renameMessageAttr) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "message" {
			a.Key = "actorMessage"
		}
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h renameMessageAttr) WithAttrs(as []slog.Attr) slog.Handler {
	return renameMessageAttr{h.Handler.WithAttrs(as)}
}

func (h renameMessageAttr) WithGroup(name string) slog.Handler {
	return renameMessageAttr{h.Handler.WithGroup(name)}
}
