package portal

import (
	"errors"
	"slices"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

func TestListenSpecsBindMode(t *testing.T) {
	sp := &messages.ServicePort{
		Key:             &messages.ServicePortKey{Namespace: "ns", Name: "svc", Protocol: messages.Protocol_UDP},
		Port:            53,
		NodePort:        30053,
		ClusterIps:      &messages.IPSet{V4: []string{"198.18.0.10"}, V6: []string{"2001:db8::10"}},
		ExternalIps:     &messages.IPSet{V4: []string{"192.0.2.10"}},
		LoadBalancerIps: &messages.IPSet{V4: []string{"198.51.100.10"}},
	}
	specs, err := ListenSpecs(sp, ModeBind, "0.0.0.0", 40000, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []ListenSpec{
		{"udp", "0.0.0.0:40000", false, true, 0},
		{"udp", "198.18.0.10:53", false, false, 0},
		{"udp", "[2001:db8::10]:53", false, false, 0},
		{"udp", "192.0.2.10:53", true, false, 0},
		{"udp", "198.51.100.10:53", true, false, 0},
		{"udp", "0.0.0.0:30053", true, false, 0},
	}
	if !slices.Equal(specs, want) {
		t.Fatalf("got %+v\nwant %+v", specs, want)
	}
}

// In kernel modes the proxy-port sockets carry SocketMark (the rules
// deliver redirected traffic only to marked sockets); netsh mode has no
// rules that redirect to them.
func TestListenSpecsMarkProxyPortsInKernelModes(t *testing.T) {
	sp := &messages.ServicePort{Key: &messages.ServicePortKey{Protocol: messages.Protocol_TCP}, Port: 80,
		ClusterIps: &messages.IPSet{V4: []string{"198.18.0.10"}}}
	for mode, mark := range map[string]int{ModeNftables: SocketMark, ModeIPTables: SocketMark, ModeNetsh: 0} {
		specs, err := ListenSpecs(sp, mode, "0.0.0.0", 40000, 40001)
		if err != nil {
			t.Fatal(err)
		}
		if specs[0].Mark != mark || specs[1].Mark != mark || !specs[0].Proxy || !specs[1].Proxy {
			t.Errorf("%s: %+v, want both proxy ports with mark %#x", mode, specs, mark)
		}
	}
}

func TestListenSpecsRejectsSCTP(t *testing.T) {
	sp := &messages.ServicePort{Key: &messages.ServicePortKey{Protocol: messages.Protocol_SCTP}, Port: 80}
	if _, err := ListenSpecs(sp, ModeBind, "0.0.0.0", 1, 0); !errors.Is(err, ErrUnsupportedProtocol) {
		t.Fatalf("want ErrUnsupportedProtocol, got %v", err)
	}
}
