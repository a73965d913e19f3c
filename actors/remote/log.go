package remote

import (
	"context"
	"log/slog"
)

// renameMessageAttr renames protoactor's "message" attribute, which would
// clash with zerolog's message field (a copy of the node proxy's, in
// actors/system.go).
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
