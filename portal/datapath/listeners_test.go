package datapath

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/messages"
)

// The bind portal listens on every service address and the node port, one
// socket each, and never on a proxy port: even one passed in is ignored.
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
		{"udp", "198.18.0.10:53", false, false, 0},
		{"udp", "[2001:db8::10]:53", false, false, 0},
		{"udp", "192.0.2.10:53", true, false, 0},
		{"udp", "198.51.100.10:53", true, false, 0},
		{"udp", "0.0.0.0:30053", true, false, 0},
	}
	if !slices.Equal(specs, want) {
		t.Fatalf("got %+v\nwant %+v", specs, want)
	}
	// netsh binds the service addresses too, and keeps winuserspace's proxy port.
	specs, err = ListenSpecs(sp, ModeNetsh, "0.0.0.0", 40000, 0)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]ListenSpec{{"udp", "0.0.0.0:40000", false, true, 0}}, want...)
	if !slices.Equal(specs, want) {
		t.Fatalf("netsh: got %+v\nwant %+v", specs, want)
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

// Listening sockets stop where they would leave the control plane's share
// of the open-file limit, with an error naming the limit; a socket closed
// makes room again.
func TestListenersStopAtTheFDLimit(t *testing.T) {
	s := NewListeners()
	const limit = 1030 // ControlPlaneFDs keeps 1,024: room for 6 listeners
	s.SetFDLimit(limit)
	var owners []*Sockets
	for i := range 8 {
		owners = append(owners, s.Sockets(fmt.Sprintf("owner-%d", i)))
	}
	t.Cleanup(func() {
		for _, o := range owners {
			o.Close()
		}
	})
	open := func(i int) error {
		_, err := owners[i].Open(ListenSpec{Network: "tcp", Address: fmt.Sprintf("127.0.50.%d:0", i+1)})
		return err
	}
	for i := range 6 {
		if err := open(i); err != nil {
			t.Fatalf("listener %d: %v", i, err)
		}
	}
	err := open(6)
	if !errors.Is(err, ErrFDLimit) || !strings.Contains(err.Error(), "open-file limit (RLIMIT_NOFILE) is 1030") {
		t.Fatalf("7th listener: %v, want ErrFDLimit naming the limit", err)
	}
	if n := s.Len(); n != 6 {
		t.Fatalf("%d listeners open, want 6", n)
	}
	owners[0].Close()
	if err := open(6); err != nil {
		t.Fatalf("after one closed: %v", err)
	}
}
