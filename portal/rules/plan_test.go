package rules

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
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

// usesOf counts what every rule of s uses, the way a mode would without a
// record: the reference UseChanges must agree with.
func usesOf(s Set) map[Use]int {
	out := map[Use]int{}
	for _, r := range s {
		for _, u := range Uses(r) {
			out[u]++
		}
	}
	return out
}

// TestProgrammedUseChanges plans random batches (new rules, verdict
// flips, moved proxy ports, short-circuits, removals) against a record
// and checks each batch's UseChanges against counting every rule before
// and after, and the record's counts after its Commit.
func TestProgrammedUseChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ips := []string{"198.18.0.1", "198.18.0.2", "2001:db8::1", "192.0.2.7"}
	random := func() Rule {
		rl := rule(fmt.Sprintf("ns/s%d:p/TCP", r.IntN(4)), []string{"tcp", "udp"}[r.IntN(2)], ips[r.IntN(len(ips))],
			80+r.IntN(3), 30000+r.IntN(5))
		if r.IntN(5) == 0 {
			rl.IP, rl.NodePort, rl.Port = netip.Addr{}, true, 30080+r.IntN(2)
		}
		rl.ClusterIP = !rl.NodePort && r.IntN(2) == 0
		switch r.IntN(4) {
		case 0:
			rl.Reject = true
		case 1:
			rl.Drop = true
		}
		if !rl.Reject && r.IntN(3) == 0 {
			rl.ShortCircuitPort = 30000 + r.IntN(5)
		}
		return rl
	}
	p := NewProgrammed(Set{})
	planned := 0
	for step := range 2000 {
		var upserts, removals []Rule
		for range r.IntN(4) {
			upserts = append(upserts, random())
		}
		for range r.IntN(3) {
			removals = append(removals, random())
		}
		// One upsert per key, as a batch of service ports' rules has.
		seen := map[Key]bool{}
		upserts = slices.DeleteFunc(upserts, func(rl Rule) bool { k := rl.Key(); d := seen[k]; seen[k] = true; return d })
		del, add, err := p.Plan(upserts, removals)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		planned += len(del) + len(add)
		before := usesOf(p.Set)
		started, stopped := p.UseChanges(del, add)
		p.Commit(del, add)
		after := usesOf(p.Set)
		var wantStarted, wantStopped []Use
		for u := range after {
			if before[u] == 0 {
				wantStarted = append(wantStarted, u)
			}
		}
		for u := range before {
			if after[u] == 0 {
				wantStopped = append(wantStopped, u)
			}
		}
		slices.SortFunc(wantStarted, compareUses)
		slices.SortFunc(wantStopped, compareUses)
		if !slices.Equal(started, wantStarted) || !slices.Equal(stopped, wantStopped) {
			t.Fatalf("step %d: del %v add %v\nstarted %v, want %v\nstopped %v, want %v", step, del, add, started, wantStarted, stopped, wantStopped)
		}
		for u, n := range after {
			if got := p.Rules(u); got != n {
				t.Fatalf("step %d: %v used by %d rules, the record says %d", step, u, n, got)
			}
		}
		if len(p.uses) != len(after) {
			t.Fatalf("step %d: the record counts %d uses, the rules have %d", step, len(p.uses), len(after))
		}
	}
	if planned < 2000 {
		t.Fatalf("%d rules planned over 2000 batches: the batches change too little to test", planned)
	}
}

// The index follows every commit: after random plans (rules added,
// changed, removed, keys taken over by another service port), it equals
// the index built from the set alone.
func TestProgrammedIndexFollowsCommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rec := NewProgrammed(Set{})
	for step := range 2000 {
		var upserts, removals []Rule
		for range 1 + rng.IntN(4) {
			r := Rule{
				ServicePort: fmt.Sprintf("ns/s%d:p/TCP", rng.IntN(6)),
				Protocol:    "tcp",
				IP:          netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + rng.IntN(8))}),
				Port:        80,
				ProxyPort:   30000 + rng.IntN(3),
				ClusterIP:   rng.IntN(2) == 0,
			}
			switch rng.IntN(4) {
			case 0:
				r.Drop, r.ProxyPort = true, 0
			case 1:
				r.Reject, r.ProxyPort = true, 0
			}
			if old, ok := rec.Set[r.Key()]; ok && rng.IntN(3) == 0 {
				removals = append(removals, old)
				continue
			}
			if _, ok := rec.Set[r.Key()]; !ok || slices.IndexFunc(upserts, func(u Rule) bool { return u.Key() == r.Key() }) < 0 {
				upserts = append(upserts, r)
			}
		}
		del, add, err := rec.Plan(upserts, removals)
		if err != nil {
			continue // two upserts of one key in a plan: refused, as the kernel would be
		}
		rec.Commit(del, add)
		want := NewProgrammed(maps.Clone(rec.Set))
		if !sameIndex(rec.byPort, want.byPort) || !maps.Equal(rec.dropInternal, want.dropInternal) || !maps.Equal(rec.dropExternal, want.dropExternal) {
			t.Fatalf("step %d: index %v, drops %v %v; built from the set: %v, %v %v", step,
				rec.byPort, rec.dropInternal, rec.dropExternal, want.byPort, want.dropInternal, want.dropExternal)
		}
	}
}

func sameIndex(a, b map[string][]Key) bool {
	if len(a) != len(b) {
		return false
	}
	for id, ka := range a {
		kb := b[id]
		if len(ka) != len(kb) {
			return false
		}
		for _, k := range ka {
			if !slices.Contains(kb, k) {
				return false
			}
		}
	}
	return true
}
