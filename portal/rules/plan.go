package rules

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
)

// Set is what an implementation has programmed, by key.
type Set map[Key]Rule

// Desired validates rules for Sync and indexes them by key.
func Desired(rules []Rule) (Set, error) {
	set := make(Set, len(rules))
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		r = normalize(r)
		if old, ok := set[r.Key()]; ok && old != r {
			return nil, fmt.Errorf("portal rules %s and %s have the same key %s", old.ServicePort, r.ServicePort, r.Key())
		}
		set[r.Key()] = r
	}
	return set, nil
}

// Plan computes what Apply changes in the kernel: rules to take out (as
// they are programmed now) and rules to put in. Removals come first, then
// upserts; a key in both ends up upserted. It does not modify cur.
func (cur Set) Plan(upserts, removals []Rule) (del, add []Rule, err error) {
	want := make(map[Key]*Rule, len(upserts)+len(removals))
	for _, r := range removals {
		if err := r.ValidateKey(); err != nil {
			return nil, nil, err
		}
		want[r.Key()] = nil
	}
	seen := make(map[Key]Rule, len(upserts))
	for _, r := range upserts {
		if err := r.Validate(); err != nil {
			return nil, nil, err
		}
		r = normalize(r)
		k := r.Key()
		if old, ok := seen[k]; ok && old != r {
			return nil, nil, fmt.Errorf("portal rules %s and %s have the same key %s", old.ServicePort, r.ServicePort, k)
		}
		seen[k] = r
		want[k] = &r
	}
	for k, w := range want {
		old, had := cur[k]
		switch {
		case w == nil && had:
			del = append(del, old)
		case w != nil && !had:
			add = append(add, *w)
		case w != nil && had && old != *w:
			del = append(del, old)
			add = append(add, *w)
		}
	}
	Sort(del)
	Sort(add)
	return del, add, nil
}

// Commit records an applied plan (Programmed.Commit also keeps its counts
// and index).
func (s Set) Commit(del, add []Rule) {
	for _, r := range del {
		delete(s, r.Key())
	}
	for _, r := range add {
		s[r.Key()] = r
	}
}

// Sorted lists the set in Sort order.
func (s Set) Sorted() []Rule {
	out := make([]Rule, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	Sort(out)
	return out
}

// Sort orders rules deterministically, so generated commands are stable.
func Sort(rs []Rule) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i].Key(), rs[j].Key()
		if a.NodePort != b.NodePort {
			return !a.NodePort
		}
		if c := a.IP.Compare(b.IP); c != 0 {
			return c < 0
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Protocol < b.Protocol
	})
}

// Programmed is what is programmed, as the caller's record holds it (the
// kernel modes keep none): the rules by key, and how many of them use
// each thing the kernel shares between rules (Use), kept as rules come
// and go. A plan's UseChanges are looked up, not counted over every rule,
// so Apply costs what changed.
type Programmed struct {
	Set
	uses map[Use]int
	// byPort is, by service port ID, the keys of its rules: the rules a
	// changed service port leaves behind are looked up, not searched for.
	byPort map[string][]Key
	// The service ports with a drop rule, for cluster IPs and for the
	// external addresses (kubeproxy_sync_proxy_rules_no_local_endpoints_total).
	dropInternal, dropExternal map[string]bool
}

// Use is one thing rules share in the kernel, which a mode adds with the
// first rule that uses it and removes with the last.
type Use struct {
	Kind     UseKind
	IP       netip.Addr // ClusterIP, Address
	Protocol string     // ProxyPort: "tcp" or "udp"
	Port     int        // ProxyPort
}

// UseKind says what a Use is.
type UseKind uint8

const (
	// UseClusterIP is a cluster IP with a rule (nftables' cluster IP sets
	// reject its other ports).
	UseClusterIP UseKind = iota
	// UseAddress is a service address with a rule, node ports aside (netsh
	// puts it on an interface).
	UseAddress
	// UseProxyPort is a proxy port some rule sends traffic to (nftables'
	// proxy port set).
	UseProxyPort
)

// Uses lists what r uses.
func Uses(r Rule) []Use {
	var out []Use
	if !r.NodePort {
		out = append(out, Use{Kind: UseAddress, IP: r.IP})
		if r.ClusterIP {
			out = append(out, Use{Kind: UseClusterIP, IP: r.IP})
		}
	}
	serves := !r.Reject && !r.Drop && r.ProxyPort != 0
	if serves {
		out = append(out, Use{Kind: UseProxyPort, Protocol: r.Protocol, Port: r.ProxyPort})
	}
	if r.ShortCircuitPort != 0 && (!serves || r.ShortCircuitPort != r.ProxyPort) {
		out = append(out, Use{Kind: UseProxyPort, Protocol: r.Protocol, Port: r.ShortCircuitPort})
	}
	return out
}

// InUse lists, sorted, the uses of kind that rules of s have: what a full
// sync puts in the kernel besides the rules.
func (s Set) InUse(kind UseKind) []Use {
	seen := map[Use]bool{}
	var out []Use
	for _, r := range s {
		for _, u := range Uses(r) {
			if u.Kind == kind && !seen[u] {
				seen[u] = true
				out = append(out, u)
			}
		}
	}
	slices.SortFunc(out, compareUses)
	return out
}

// NewProgrammed records s as programmed.
func NewProgrammed(s Set) *Programmed {
	p := &Programmed{Set: s, uses: map[Use]int{}, byPort: map[string][]Key{}, dropInternal: map[string]bool{}, dropExternal: map[string]bool{}}
	for key, r := range s {
		p.count(r, 1)
		p.byPort[r.ServicePort] = append(p.byPort[r.ServicePort], key)
	}
	for id := range p.byPort {
		p.reindexDrops(id)
	}
	return p
}

// Owned is the service port's rules as programmed.
func (p *Programmed) Owned(servicePort string) []Rule {
	out := make([]Rule, 0, len(p.byPort[servicePort]))
	for _, key := range p.byPort[servicePort] {
		out = append(out, p.Set[key])
	}
	return out
}

// Dropping is how many service ports have a drop rule for their cluster
// IPs (internal) and for their external addresses (external).
func (p *Programmed) Dropping() (internal, external int) {
	return len(p.dropInternal), len(p.dropExternal)
}

// Rules is how many programmed rules use u.
func (p *Programmed) Rules(u Use) int { return p.uses[u] }

// UseChanges is what the plan del, add (Set.Plan's, against p) starts
// using and stops using, sorted: what a mode adds to and takes out of the
// kernel besides the rules themselves.
func (p *Programmed) UseChanges(del, add []Rule) (started, stopped []Use) {
	delta := map[Use]int{}
	replaced := map[Key]bool{}
	out := func(k Key) {
		if old, ok := p.Set[k]; ok && !replaced[k] {
			replaced[k] = true
			for _, u := range Uses(old) {
				delta[u]--
			}
		}
	}
	for _, r := range del {
		out(r.Key())
	}
	for _, r := range add {
		out(r.Key())
		for _, u := range Uses(r) {
			delta[u]++
		}
	}
	for u, d := range delta {
		switch before := p.uses[u]; {
		case before == 0 && d > 0:
			started = append(started, u)
		case before > 0 && before+d == 0:
			stopped = append(stopped, u)
		}
	}
	slices.SortFunc(started, compareUses)
	slices.SortFunc(stopped, compareUses)
	return started, stopped
}

// Commit records an applied plan (Set.Commit): what it changed in use,
// and the index of the service ports it touched.
func (p *Programmed) Commit(del, add []Rule) {
	touched := map[string]bool{}
	for _, r := range del {
		if old, ok := p.Set[r.Key()]; ok {
			p.count(old, -1)
			touched[old.ServicePort] = true
			delete(p.Set, r.Key())
		}
	}
	for _, r := range add {
		if old, ok := p.Set[r.Key()]; ok {
			p.count(old, -1)
			touched[old.ServicePort] = true // a key taken over
		}
		p.Set[r.Key()] = r
		p.count(r, 1)
		touched[r.ServicePort] = true
		p.byPort[r.ServicePort] = append(p.byPort[r.ServicePort], r.Key())
	}
	for id := range touched {
		keys := p.byPort[id][:0] // filtered in place: a service port has a few
		for _, key := range p.byPort[id] {
			if r, ok := p.Set[key]; ok && r.ServicePort == id && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		if len(keys) == 0 {
			delete(p.byPort, id)
		} else {
			p.byPort[id] = keys
		}
		p.reindexDrops(id)
	}
}

func (p *Programmed) reindexDrops(id string) {
	delete(p.dropInternal, id)
	delete(p.dropExternal, id)
	for _, key := range p.byPort[id] {
		switch r := p.Set[key]; {
		case r.Drop && r.ClusterIP:
			p.dropInternal[id] = true
		case r.Drop:
			p.dropExternal[id] = true
		}
	}
}

func (p *Programmed) count(r Rule, d int) {
	for _, u := range Uses(r) {
		if n := p.uses[u] + d; n > 0 {
			p.uses[u] = n
		} else {
			delete(p.uses, u)
		}
	}
}

func compareUses(a, b Use) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), a.IP.Compare(b.IP), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}
