package remote

import (
	"encoding/binary"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// The core encodes each change once, however many backends get it.
//
// Protobuf's encoding of a message is the concatenation of its fields, and
// a repeated field (a map too) may come in any number of runs that a
// decoder appends together. So a piece of a Delta (one service's upserts,
// deletes and trigger time) is marshalled once as a Delta holding only
// those, and a backend's Delta is its session and seq followed by its
// pieces' bytes; a Snapshot likewise, from each service's view marshalled
// once. The bytes ride as the message's unknown fields, which proto.Marshal
// writes out as they are: on the wire the message is an ordinary Delta or
// Snapshot, and a backend of any version reads it as one.

// encoder encodes one flush's Deltas: backends that get the same pieces
// share the same bytes.
type encoder struct {
	ids    map[*watcher.Piece]int
	bodies map[string][]byte
}

func newEncoder() *encoder {
	return &encoder{ids: map[*watcher.Piece]int{}, bodies: map[string][]byte{}}
}

// delta is the encoding of pieces' changes; compact, for a backend that
// takes endpoint updates and their trigger times (Subscribe's
// endpoint_updates and update_triggers).
func (e *encoder) delta(pieces []*watcher.Piece, compact bool) []byte {
	if len(pieces) == 1 {
		return pieceBytes(pieces[0], compact)
	}
	key := make([]byte, 1, 1+2*len(pieces))
	if compact {
		key[0] = 1
	}
	for _, p := range pieces {
		id, ok := e.ids[p]
		if !ok {
			id = len(e.ids)
			e.ids[p] = id
		}
		key = binary.AppendUvarint(key, uint64(id))
	}
	if body, ok := e.bodies[string(key)]; ok {
		return body
	}
	n := 0
	for _, p := range pieces {
		n += len(pieceBytes(p, compact))
	}
	body := make([]byte, 0, n)
	for _, p := range pieces {
		body = append(body, pieceBytes(p, compact)...)
	}
	e.bodies[string(key)] = body
	return body
}

// pieceBytes is p as Delta fields, marshalled on first use. Compact, an
// upsert that changed only endpoints is an EndpointsUpdate: the backend
// keeps the definition it holds, and decodes none.
func pieceBytes(p *watcher.Piece, compact bool) []byte {
	memo := &p.Memo
	if compact {
		memo = &p.CompactMemo
	}
	if *memo == nil {
		d := &messages.Delta{Upserts: p.Upserts, Deletes: p.Deletes}
		if compact {
			// Endpoint updates carry their trigger time themselves.
			d.Upserts, d.EndpointUpdates = p.Compact()
		}
		if len(d.Upserts) > 0 && !p.Trigger.IsZero() {
			d.TriggerUnixNano = map[string]int64{p.Service: p.Trigger.UnixNano()}
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(d)
		if err != nil {
			panic(err) // messages built by watcher always marshal
		}
		*memo = append([]byte{}, b...)
	}
	return *memo
}

// snapshotBody is the encoding of a Snapshot's service ports, each view
// marshalled once for every backend that holds it.
func snapshotBody(views []*watcher.ClassView) []byte {
	n := 0
	for _, v := range views {
		if v.Memo == nil {
			b, err := proto.Marshal(&messages.Snapshot{ServicePorts: v.Ports})
			if err != nil {
				panic(err)
			}
			v.Memo = b
		}
		n += len(v.Memo)
	}
	body := make([]byte, 0, n)
	for _, v := range views {
		body = append(body, v.Memo...)
	}
	return body
}
