package actors

import (
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// stateReport sets every field of ServicePortState but Deleted (the
// Proxier's, for a deleted service port): a field added to the message
// must be added there too, or reports would lack it.
func TestStateReportSetsEveryField(t *testing.T) {
	rec := &record{
		applied: &messages.UpsertServicePort{ServicePort: svcPort("s", messages.Protocol_TCP, "127.0.0.1", 80),
			Endpoints: endpoints("127.0.0.2:80"), Generation: 3},
		proxyPort: 1, extPort: 4,
		status: portStatus{restarts: 2, listen: []string{"127.0.0.1:80"}, err: "e",
			failures: []*messages.Failure{{Message: "f"}}, ejected: []*messages.EjectedEndpoint{{Endpoint: "x"}}},
	}
	st := rec.stateReport("a").ProtoReflect()
	fields := st.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Name() == "deleted" {
			continue
		}
		if !st.Has(f) {
			t.Errorf("stateReport leaves %s unset", f.Name())
		}
	}
	if n := fields.Len(); n != 13 {
		t.Fatalf("ServicePortState has %d fields, the test knows 13: check stateReport sets the new ones", n)
	}
}
