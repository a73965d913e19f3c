package rules

import (
	"fmt"
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

// Commit records an applied plan.
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
