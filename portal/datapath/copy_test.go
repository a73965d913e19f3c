package datapath

import (
	"io"
	"net"
	"testing"
	"time"
)

// A backend that writes its answer and closes at once puts the data and
// its FIN in the proxy's socket together, so one read takes both: the
// end of the stream must still reach the client (the copy must not wait
// for a readiness that will not come again).
func TestDataAndCloseTogetherReachTheClient(t *testing.T) {
	backend := namedBackend(t, "answer and goodbye")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return backend, nil })}
	go p.Serve(ln.(*net.TCPListener), nil)
	for i := range 200 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != "answer and goodbye" {
			t.Fatalf("connection %d: got %q, %v; want the answer, then the end of the stream", i, got, err)
		}
	}
}
