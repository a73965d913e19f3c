package actors

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kproxy/kproxy/messages"
)

// stateCopy lists every field of ServicePortState: a field added to the
// message must be added there too, or reports would lose it.
func TestStateCopyKeepsEveryField(t *testing.T) {
	st := &messages.ServicePortState{
		Key: key("s", messages.Protocol_TCP), ServicePort: svcPort("s", messages.Protocol_TCP, "127.0.0.1", 80),
		Endpoints: endpoints("127.0.0.2:80"), ListenAddresses: []string{"127.0.0.1:80"}, ProxyPort: 1, Restarts: 2,
		Error: "e", Generation: 3, Deleted: true, ActorId: "a", ExternalProxyPort: 4,
		Failures: []*messages.Failure{{Message: "f"}}, Ejected: []*messages.EjectedEndpoint{{Endpoint: "x"}},
	}
	if n := st.ProtoReflect().Descriptor().Fields().Len(); n != 13 {
		t.Fatalf("ServicePortState has %d fields, stateCopy copies 13: update it", n)
	}
	if got := stateCopy(st); !proto.Equal(got, st) {
		t.Fatalf("stateCopy lost fields:\n%v\nwant\n%v", got, st)
	}
}
