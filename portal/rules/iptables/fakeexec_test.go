package iptables

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// fakeTables plays iptables-save and iptables-restore --noflush (and the
// ip6tables pair) against in-memory tables, and keeps a transcript of what
// it was fed: enough of their behaviour to golden-test the commands kproxy
// sends without root. The netns tests prove them against the real tools.
type fakeTables struct {
	noIPv6     bool
	transcript strings.Builder
	// family ("iptables"/"ip6tables") -> table -> chain -> rule specs
	tables map[string]map[string]map[string][]string
}

var builtin = map[string][]string{"nat": {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}, "filter": {"INPUT", "FORWARD", "OUTPUT"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}}

func newFakeTables() *fakeTables {
	f := &fakeTables{tables: map[string]map[string]map[string][]string{}}
	for _, fam := range []string{"iptables", "ip6tables"} {
		f.tables[fam] = map[string]map[string][]string{}
		for table, chains := range builtin {
			f.tables[fam][table] = map[string][]string{}
			for _, c := range chains {
				f.tables[fam][table][c] = nil
			}
		}
	}
	return f
}

func (f *fakeTables) run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	fam, tool, _ := strings.Cut(name, "-")
	if fam == "ip6tables" && f.noIPv6 {
		return nil, fmt.Errorf("%s: executable file not found in $PATH", name)
	}
	switch {
	case tool == "save" && len(args) == 2 && args[0] == "-t":
		return []byte(f.save(fam, args[1])), nil
	case tool == "restore" && slices.Equal(args, []string{"-w", "--noflush"}):
		fmt.Fprintf(&f.transcript, "$ %s %s\n%s", name, strings.Join(args, " "), stdin)
		return nil, f.restore(fam, string(stdin))
	}
	return nil, fmt.Errorf("unexpected command %s %v", name, args)
}

func (f *fakeTables) save(fam, table string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", table)
	chains := f.chains(fam, table)
	for _, c := range chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, c := range chains {
		for _, spec := range f.tables[fam][table][c] {
			fmt.Fprintf(&b, "-A %s %s\n", c, spec)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func (f *fakeTables) chains(fam, table string) []string {
	var out []string
	for c := range f.tables[fam][table] {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// restore applies input as iptables-restore --noflush does; a bad line
// fails the whole input (tables are committed at COMMIT).
func (f *fakeTables) restore(fam, input string) error {
	var table string
	var pending map[string][]string
	for n, line := range strings.Split(strings.TrimSuffix(input, "\n"), "\n") {
		fail := func(why string) error { return fmt.Errorf("line %d failed: %s: %s", n+1, why, line) }
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			pending = map[string][]string{}
			for c, rs := range f.tables[fam][table] {
				pending[c] = slices.Clone(rs)
			}
		case line == "COMMIT":
			f.tables[fam][table] = pending
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			pending[name] = nil // creates or flushes
		default:
			op, rest, _ := strings.Cut(line, " ")
			chain, spec, _ := strings.Cut(rest, " ")
			rs, ok := pending[chain]
			if !ok {
				return fail("no chain " + chain)
			}
			switch op {
			case "-A":
				pending[chain] = append(rs, spec)
			case "-I":
				pending[chain] = append([]string{spec}, rs...)
			case "-D":
				i := slices.Index(rs, spec)
				if i < 0 {
					return fail("no such rule")
				}
				pending[chain] = slices.Delete(rs, i, i+1)
			case "-X":
				delete(pending, chain)
			default:
				return fail("unknown operation")
			}
		}
	}
	return nil
}

// take returns the transcript so far and starts a new one.
func (f *fakeTables) take() string {
	s := f.transcript.String()
	f.transcript.Reset()
	return s
}

// dump is every table of every family, as iptables-save prints them.
func (f *fakeTables) dump() string {
	var b strings.Builder
	for _, fam := range []string{"iptables", "ip6tables"} {
		if fam == "ip6tables" && f.noIPv6 {
			continue
		}
		for _, table := range []string{"nat", "filter"} {
			fmt.Fprintf(&b, "# %s-save -t %s\n%s", fam, table, f.save(fam, table))
		}
	}
	return b.String()
}
