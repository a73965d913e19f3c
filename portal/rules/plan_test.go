package rules

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/kproxy/kproxy/portal/steer"
)

func rule(sp, proto, ip string, port, pp int) Rule {
	r := Rule{ServicePort: sp, Protocol: proto, Port: port, ProxyPort: pp}
	if ip == "" {
		r.NodePort = true
	} else {
		r.IP = netip.MustParseAddr(ip)
	}
	return r
}

func TestPlan(t *testing.T) {
	a := rule("ns/a:http/TCP", "tcp", "198.18.0.1", 80, 30001)
	b := rule("ns/b:dns/UDP", "udp", "2001:db8:5::1", 53, 30002)
	np := rule("ns/a:http/TCP", "tcp", "", 30080, 30001)
	cur := Set{a.Key(): a, b.Key(): b, np.Key(): np}

	aReject := a
	aReject.Reject = true
	aMapped := a
	aMapped.IP = netip.MustParseAddr("::ffff:198.18.0.1")
	c := rule("ns/c:http/TCP", "tcp", "198.18.0.3", 80, 30003)

	for _, tc := range []struct {
		name               string
		upserts, removals  []Rule
		wantDel, wantAdd   []Rule
		wantErr            bool
		wantErrUnsupported bool
	}{
		{name: "nothing"},
		{name: "identical upsert is a no-op", upserts: []Rule{a, np}},
		{name: "IPv4-mapped is the same key", upserts: []Rule{aMapped}},
		{name: "changed value replaces", upserts: []Rule{aReject}, wantDel: []Rule{a}, wantAdd: []Rule{{ServicePort: a.ServicePort, Protocol: "tcp", IP: a.IP, Port: 80, Reject: true}}},
		{name: "removal", removals: []Rule{b, np}, wantDel: []Rule{b, np}},
		{name: "removal of an absent rule is ignored", removals: []Rule{c}},
		{name: "removal needs only the key", removals: []Rule{{Protocol: "udp", IP: b.IP, Port: 53}}, wantDel: []Rule{b}},
		{name: "new rule", upserts: []Rule{c}, wantAdd: []Rule{c}},
		{name: "removal then upsert of one key keeps the upsert", upserts: []Rule{a}, removals: []Rule{a}},
		{name: "conflicting upserts", upserts: []Rule{a, aReject}, wantErr: true},
		{name: "bad protocol", upserts: []Rule{rule("x", "sctp", "198.18.0.1", 80, 1)}, wantErr: true, wantErrUnsupported: true},
		{name: "bad proxy port", upserts: []Rule{rule("x", "tcp", "198.18.0.1", 80, 0)}, wantErr: true},
		{name: "node port with IP", upserts: []Rule{{Protocol: "tcp", IP: a.IP, Port: 80, NodePort: true, ProxyPort: 1}}, wantErr: true},
		{name: "unspecified IP", upserts: []Rule{rule("x", "tcp", "0.0.0.0", 80, 1)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			del, add, err := cur.Plan(tc.upserts, tc.removals)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErrUnsupported && !errors.Is(err, steer.ErrUnsupportedProtocol) {
				t.Errorf("err = %v, want ErrUnsupportedProtocol", err)
			}
			if !reflect.DeepEqual(del, tc.wantDel) || !reflect.DeepEqual(add, tc.wantAdd) {
				t.Errorf("del %v add %v, want del %v add %v", del, add, tc.wantDel, tc.wantAdd)
			}
		})
	}
	if len(cur) != 3 {
		t.Errorf("plan modified the current set: %v", cur)
	}
}

func TestDesiredSet(t *testing.T) {
	a := rule("ns/a:http/TCP", "tcp", "198.18.0.1", 80, 30001)
	dup := a
	dup.ProxyPort = 30002
	if _, err := Desired([]Rule{a, a}); err != nil {
		t.Errorf("identical duplicates: %v", err)
	}
	if _, err := Desired([]Rule{a, dup}); err == nil {
		t.Error("conflicting duplicates accepted")
	}
	s, err := Desired([]Rule{{ServicePort: "r", Protocol: "udp", IP: a.IP, Port: 53, ProxyPort: 9, Reject: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s {
		if r.ProxyPort != 0 {
			t.Errorf("reject rule keeps proxy port %d", r.ProxyPort)
		}
	}
}

func TestRuleComment(t *testing.T) {
	for in, want := range map[string]string{
		"ns/name:port/TCP":    "ns/name:port/TCP",
		`a"b c;d`:             "a_b_c_d",
		"":                    "",
		"kube-system/dns:53/": "kube-system/dns:53/",
	} {
		if got := Comment(in); got != want {
			t.Errorf("Comment(%q) = %q, want %q", in, got, want)
		}
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	if got := Comment(string(long)); len(got) != 100 {
		t.Errorf("long comment kept %d bytes", len(got))
	}
}
