package liveview

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// tickInterval is how often the stream sends the tree's totals (the page
// refreshes its visible rows' counters then); restarts and changes go out
// as they happen.
const tickInterval = time.Second

// maxBatch bounds the events written between two flushes.
const maxBatch = 256

// maxStreams bounds the open event streams (each holds a buffer of
// subscriberLen events).
const maxStreams = 64

// events serves GET /api/events: server-sent events, "restart", "change"
// and "storm" as they happen (the last ones first, for a page that just
// opened), "tick" with the tree every second, "dropped" when this client
// fell behind and lost some.
func (v *view) events(w http.ResponseWriter, r *http.Request) {
	if v.streams.Add(1) > maxStreams {
		v.streams.Add(-1)
		httpError(w, http.StatusServiceUnavailable, fmt.Errorf("%d event streams are open already", maxStreams))
		return
	}
	defer v.streams.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	s, past, cancel := v.hub.subscribe()
	defer cancel()
	w.WriteHeader(http.StatusOK)
	if writeSSE(w, "tick", 0, v.tree()) != nil {
		return
	}
	for _, e := range past {
		if v.writeEvent(w, e) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-v.ctx.Done():
			return
		case <-tick.C:
			err = writeSSE(w, "tick", 0, v.tree())
		case e := <-s.events:
			err = v.writeEvent(w, e)
			// Only this goroutine receives: what is queued can be taken.
			for n := 1; n < maxBatch && err == nil && len(s.events) > 0; n++ {
				err = v.writeEvent(w, <-s.events)
			}
		}
		if n := s.takeDropped(); n > 0 && err == nil {
			err = writeSSE(w, "dropped", 0, map[string]int64{"dropped": n})
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// writeEvent sends e with its service port's row as it is now.
func (v *view) writeEvent(w io.Writer, e Event) error {
	if e.ServicePort != "" {
		e.Row = v.model.rowOf(e.ServicePort)
	}
	return writeSSE(w, e.Kind, e.Seq, e)
}

func writeSSE(w io.Writer, kind string, seq int64, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if seq > 0 {
		_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, kind, data)
	} else {
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data)
	}
	return err
}
