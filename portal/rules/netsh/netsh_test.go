package netsh

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/rules"
	"github.com/kproxy/kproxy/test/rulestest"
)

func TestNetshCommands(t *testing.T) {
	got := netshCommands("vEthernet (HNS Internal NIC)",
		[]netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")},
		[]netip.Addr{netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("fd00::11")})
	want := [][]string{
		{"netsh", "interface", "ipv4", "delete", "address", "name=vEthernet (HNS Internal NIC)", "address=10.96.0.11"},
		{"netsh", "interface", "ipv6", "delete", "address", "interface=vEthernet (HNS Internal NIC)", "address=fd00::11"},
		{"netsh", "interface", "ipv4", "add", "address", "name=vEthernet (HNS Internal NIC)", "address=10.96.0.10", "mask=255.255.255.255", "store=active"},
		{"netsh", "interface", "ipv6", "add", "address", "interface=vEthernet (HNS Internal NIC)", "address=fd00::10/128", "store=active"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("netshCommands:\n got %q\nwant %q", got, want)
	}
}

func TestParseNetshAddresses(t *testing.T) {
	v4 := `
Configuration for interface "vEthernet (HNS Internal NIC)"
    DHCP enabled:                         No
    IP Address:                           172.30.160.1
    Subnet Prefix:                        172.30.160.0/20 (mask 255.255.240.0)
    IP Address:                           10.96.0.10
    Subnet Prefix:                        10.96.0.10/32 (mask 255.255.255.255)
`
	v6 := `
Address fe80::1%12 Parameters
---------------------------------------------------------
Addr Type  DAD State   Valid Life Pref. Life Address
---------  ----------- ---------- ---------- ------------------------
Manual     Preferred     infinite   infinite fd00::10
Other      Preferred     infinite   infinite fe80::1%12
`
	got := parseNetshAddresses(v4 + v6)
	for _, ip := range []string{"172.30.160.1", "10.96.0.10", "fd00::10"} {
		if !got[netip.MustParseAddr(ip)] {
			t.Errorf("%s not found in %v", ip, got)
		}
	}
	if got[netip.MustParseAddr("172.30.160.0")] {
		t.Error("prefix taken for an address")
	}
}

// fakeNetsh plays netsh against an in-memory interface.
type fakeNetsh struct {
	iface string
	addrs map[netip.Addr]bool
	cmds  []string
	lines []string // every command line run, for golden tests
	fail  string   // a command containing this fails
}

func (f *fakeNetsh) run(_ context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	f.lines = append(f.lines, line)
	if f.fail != "" && strings.Contains(line, f.fail) {
		return nil, fmt.Errorf("%s: exit status 1", line)
	}
	if len(args) < 5 || name != "netsh" || args[0] != "interface" {
		return nil, fmt.Errorf("unexpected command %q", line)
	}
	kv := map[string]string{}
	for _, a := range args[4:] {
		k, v, _ := strings.Cut(a, "=")
		kv[k] = v
	}
	if kv["name"]+kv["interface"] != f.iface {
		return nil, fmt.Errorf("%s: no such interface", line)
	}
	if args[2] == "show" {
		var b strings.Builder
		for ip := range f.addrs {
			if ip.Is4() == (args[1] == "ipv4") {
				fmt.Fprintf(&b, "    IP Address:   %s\n", ip)
			}
		}
		return []byte(b.String()), nil
	}
	f.cmds = append(f.cmds, args[2]+" "+strings.TrimSuffix(kv["address"], "/128"))
	ip := netip.MustParseAddr(strings.TrimSuffix(kv["address"], "/128"))
	switch args[2] {
	case "add":
		if f.addrs[ip] {
			return nil, fmt.Errorf("%s: The object already exists", line)
		}
		f.addrs[ip] = true
	case "delete":
		if !f.addrs[ip] {
			return nil, fmt.Errorf("%s: Element not found", line)
		}
		delete(f.addrs, ip)
	}
	return nil, nil
}

func (f *fakeNetsh) take() []string {
	c := f.cmds
	f.cmds = nil
	return c
}

func TestNetshRules(t *testing.T) {
	ctx := context.Background()
	admin := netip.MustParseAddr("172.30.160.1")
	f := &fakeNetsh{iface: "svc0", addrs: map[netip.Addr]bool{admin: true}}
	n := rulestest.Program(newRules(rules.Options{}, f.run, func(k string) string {
		if k == "INTERFACE_TO_ADD_SERVICE_IP" {
			return "svc0"
		}
		return ""
	}))
	tcp := rulestest.Rule("ns/a:http/TCP", "tcp", "10.96.0.10", 80, 30001)
	udp := rulestest.Rule("ns/a:dns/UDP", "udp", "10.96.0.10", 53, 30002)
	v6 := rulestest.Rule("ns/a:http/TCP", "tcp", "fd00::10", 80, 30001)
	np := rulestest.Rule("ns/a:http/TCP", "tcp", "", 30080, 30001)
	rej := rulestest.Rule("ns/b:http/TCP", "tcp", "10.96.0.20", 80, 0)
	rej.Reject = true

	if err := n.Sync(ctx, []rules.Rule{tcp, udp, v6, np, rej}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), []string{"add 10.96.0.10", "add 10.96.0.20", "add fd00::10"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Sync ran %q, want %q", got, want)
	}
	if ok, err := n.Present(ctx); !ok || err != nil {
		t.Errorf("Present = %v, %v", ok, err)
	}

	// An IP goes with its last rule; a changed proxy port changes nothing.
	moved := udp
	moved.ProxyPort = 30009
	if err := n.Apply(ctx, []rules.Rule{moved}, []rules.Rule{tcp, np}); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); len(got) != 0 {
		t.Errorf("Apply ran %q, want nothing", got)
	}
	newIP := rulestest.Rule("ns/c:http/TCP", "tcp", "10.96.0.30", 80, 30003)
	if err := n.Apply(ctx, []rules.Rule{newIP}, []rules.Rule{udp}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), []string{"delete 10.96.0.10", "add 10.96.0.30"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Apply ran %q, want %q", got, want)
	}

	// Someone deletes an address: Present says so, Sync restores.
	delete(f.addrs, netip.MustParseAddr("fd00::10"))
	if ok, _ := n.Present(ctx); ok {
		t.Error("Present with an address missing")
	}
	if err := n.Sync(ctx, []rules.Rule{v6, rej, newIP}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), []string{"add fd00::10"}; !reflect.DeepEqual(got, want) {
		t.Errorf("re-Sync ran %q, want %q", got, want)
	}

	// A failure half-way: the caller's record does not take the change,
	// and the caller syncs (as the Rules actor does after any failure).
	f.fail = "10.96.0.40"
	failed := rulestest.Rule("ns/d:http/TCP", "tcp", "10.96.0.40", 80, 1)
	if err := n.Apply(ctx, []rules.Rule{failed}, nil); err == nil {
		t.Fatal("Apply succeeded with netsh failing")
	}
	f.fail = ""
	if _, ok := n.Set[failed.Key()]; ok {
		t.Error("the record took a failed change")
	}
	if err := n.Sync(ctx, []rules.Rule{v6, rej, newIP, {Protocol: "tcp", IP: admin, Port: 80, ProxyPort: 1}}); err != nil {
		t.Fatal(err)
	}
	f.take()

	if err := n.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]bool{} // the admin address was in a rule, so it went too
	if !reflect.DeepEqual(f.addrs, want) {
		t.Errorf("after Cleanup the interface has %v", f.addrs)
	}
	if err := n.Cleanup(ctx); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
}

func TestNetshInterfaceDefault(t *testing.T) {
	n := newRules(rules.Options{}, nil, func(string) string { return "" })
	if n.iface != DefaultInterface {
		t.Errorf("iface = %q", n.iface)
	}
	n = newRules(rules.Options{Interface: "eth1"}, nil, func(string) string { return "x" })
	if n.iface != "eth1" {
		t.Errorf("iface = %q", n.iface)
	}
}
