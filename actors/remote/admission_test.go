package remote

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// TestSubscribeQueueOrder: first come, first served; asking again keeps
// the place; one that left and comes back is served last; one that
// stopped asking expires.
func TestSubscribeQueueOrder(t *testing.T) {
	q := newSubscribeQueue()
	t0 := time.Unix(1000, 0)
	h := func(node string) heldSubscribe {
		return heldSubscribe{m: &messages.Subscribe{NodeName: node}, from: actor.NewPID("x", node)}
	}
	for i, node := range []string{"a", "b", "c", "d"} {
		q.put(node, h(node), t0.Add(time.Duration(i)*time.Second))
	}
	q.put("b", h("b"), t0.Add(10*time.Second)) // asks again
	q.remove("a")
	q.put("a", h("a"), t0.Add(10*time.Second)) // left and came back
	if n := q.expire(t0.Add(3 * time.Second)); n != 1 {
		t.Fatalf("expired %d, want 1 (c, last asked at 2 s)", n)
	}
	var got []string
	for {
		s, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, s.m.GetNodeName())
	}
	if want := []string{"b", "d", "a"}; !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	if q.len() != 0 {
		t.Fatalf("%d left, want none", q.len())
	}
}
