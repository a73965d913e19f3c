package actorlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/rs/zerolog"
)

// protoactor's "message" attribute (the message an actor failed on) is
// kept as actorMessage; zerolog's message stays the log line's.
func TestMessageAttributeRenamed(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(renameMessageAttr{zerolog.NewSlogHandler(zerolog.New(&buf))})
	log.With("actor", "kproxy/proxier").Info("actor failed", "message", "InjectCrash")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if line["message"] != "actor failed" || line["actorMessage"] != "InjectCrash" || line["actor"] != "kproxy/proxier" {
		t.Fatalf("logged %s", buf.Bytes())
	}
}
