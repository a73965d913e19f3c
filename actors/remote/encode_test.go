package remote

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/watcher"
)

// TestPiecesEncodeAsOneDelta: a Delta carrying pre-encoded pieces as its
// own fields is, on the wire, the Delta holding them all: what a backend
// of any version decodes.
func TestPiecesEncodeAsOneDelta(t *testing.T) {
	at := time.Unix(1700000000, 5)
	a := &watcher.Piece{Service: "default/web", Upserts: []*messages.ServicePortEndpoints{webPort(1)}, Trigger: at}
	b := &watcher.Piece{Service: "default/old", Deletes: []*messages.ServicePortKey{servicePort("old", "192.0.2.1").GetServicePort().GetKey()}}
	c := &watcher.Piece{Service: "default/new", Upserts: []*messages.ServicePortEndpoints{servicePort("new", "192.0.2.2")}}
	enc := newEncoder()
	body := enc.delta([]*watcher.Piece{a, b, c}, false)
	if again := enc.delta([]*watcher.Piece{a, b, c}, false); &again[0] != &body[0] {
		t.Error("the same pieces were encoded twice in one flush")
	}
	m := &messages.Delta{Session: "s", Seq: 7, SentUnixNano: 9}
	m.ProtoReflect().SetUnknown(body)
	wire, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := &messages.Delta{}
	if err := proto.Unmarshal(wire, got); err != nil {
		t.Fatal(err)
	}
	want := &messages.Delta{Session: "s", Seq: 7, SentUnixNano: 9,
		Upserts:         []*messages.ServicePortEndpoints{webPort(1), servicePort("new", "192.0.2.2")},
		Deletes:         b.Deletes,
		TriggerUnixNano: map[string]int64{"default/web": at.UnixNano()}}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %v\nwant %v", got, want)
	}

	// Without the wire (one actor system), the receiver decodes them.
	local := &messages.Delta{Session: "s", Seq: 7, SentUnixNano: 9}
	local.ProtoReflect().SetUnknown(body)
	carried(local)
	if !proto.Equal(local, want) {
		t.Fatalf("carried %v\nwant %v", local, want)
	}

	// A piece whose upsert changed only endpoints: a backend that takes
	// endpoint updates gets the port's key and endpoints, one that does
	// not (an older one) the whole upsert, each encoded once.
	e := &watcher.Piece{Service: "default/web", Upserts: []*messages.ServicePortEndpoints{webPort(3), servicePort("other", "192.0.2.4")},
		OnlyEndpoints: []bool{true, false}, Trigger: at}
	for _, compact := range []bool{false, true} {
		body := enc.delta([]*watcher.Piece{e, b}, compact)
		if again := enc.delta([]*watcher.Piece{e, b}, compact); &again[0] != &body[0] {
			t.Errorf("compact %v: the same pieces were encoded twice in one flush", compact)
		}
		got := &messages.Delta{}
		if err := proto.Unmarshal(body, got); err != nil {
			t.Fatal(err)
		}
		want := &messages.Delta{Upserts: e.Upserts, Deletes: b.Deletes, TriggerUnixNano: map[string]int64{"default/web": at.UnixNano()}}
		if compact {
			// The update carries its trigger time itself; the map still
			// does, for the whole upsert left.
			want.Upserts = e.Upserts[1:]
			want.EndpointUpdates = []*messages.EndpointsUpdate{{Key: webPort(3).GetServicePort().GetKey(), Endpoints: webPort(3).GetEndpoints(),
				TriggerUnixNano: at.UnixNano()}}
		}
		if !proto.Equal(got, want) {
			t.Errorf("compact %v: decoded %v\nwant %v", compact, got, want)
		}
	}
	// Only endpoints changed: a compact Delta has no map to decode.
	f := &watcher.Piece{Service: "default/web", Upserts: []*messages.ServicePortEndpoints{webPort(4)}, OnlyEndpoints: []bool{true}, Trigger: at}
	got = &messages.Delta{}
	if err := proto.Unmarshal(enc.delta([]*watcher.Piece{f}, true), got); err != nil {
		t.Fatal(err)
	}
	want = &messages.Delta{EndpointUpdates: []*messages.EndpointsUpdate{{Key: webPort(4).GetServicePort().GetKey(), Endpoints: webPort(4).GetEndpoints(),
		TriggerUnixNano: at.UnixNano()}}}
	if !proto.Equal(got, want) {
		t.Errorf("an endpoints-only piece, compact: decoded %v\nwant %v", got, want)
	}

	views := []*watcher.ClassView{{Ports: []*messages.ServicePortEndpoints{webPort(2)}}, {Ports: []*messages.ServicePortEndpoints{servicePort("x", "192.0.2.3")}}}
	s := &messages.Snapshot{Session: "s", Seq: 1, NodeName: "n"}
	s.ProtoReflect().SetUnknown(snapshotBody(views))
	wire, err = proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	gotSnap := &messages.Snapshot{}
	if err := proto.Unmarshal(wire, gotSnap); err != nil {
		t.Fatal(err)
	}
	wantSnap := &messages.Snapshot{Session: "s", Seq: 1, NodeName: "n", ServicePorts: []*messages.ServicePortEndpoints{webPort(2), servicePort("x", "192.0.2.3")}}
	if !proto.Equal(gotSnap, wantSnap) {
		t.Fatalf("snapshot decoded %v\nwant %v", gotSnap, wantSnap)
	}
}
