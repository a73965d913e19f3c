package main

import (
	"context"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// kproxy run, as users start it, in front of an endpoint with a 5-deep
// accept queue (listen(2)'s backlog 5, Python's http.server default) whose
// every 10th request takes 400 ms, under 8 connection-per-request clients:
// the kernel drops SYNs while the queue is full and retransmits them, and
// no client may see a reset or a read error, as none does directly.
func TestRunDroppedSYNsResetNoClient(t *testing.T) {
	b, err := backends.StartSlowAccept("127.0.36.11:0", 5, 10, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	in := startKproxy(t, service("queue", "127.0.36.1", 18080, b.Port(), "127.0.36.11"))
	in.waitListening(t, "default/queue:tcp/TCP", 1)

	const requests, clients = 150, 8
	made, failed, first := backends.Requests(context.Background(), "127.0.36.1:18080", requests, clients, time.Minute)
	if failed > 0 || made < requests {
		t.Fatalf("%d of %d requests failed through kproxy (first: %v)", failed, made, first)
	}
	if !in.logged("dial endpoint failed") {
		t.Fatal("no endpoint dial timed out: the accept queue never overflowed, so this proves nothing")
	}
}
