//go:build linux

package conformance

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

// docRanges are the only addresses the suite may use (besides loopback).
var docRanges = []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("2001:db8::/32"),
}

func inDocRanges(ip netip.Addr) bool {
	return ip.IsLoopback() || slices.ContainsFunc(docRanges, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// TestCasesData checks the data itself (no root needed): every manifest
// is used and parses, every address is in a documentation range, and
// every endpoint a flow wants is one of its case's endpoints.
func TestCasesData(t *testing.T) {
	files, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{exposureManifest: true}
	for _, c := range cases {
		used[c.manifest] = true
		m, err := readManifest(c.manifest)
		if err != nil {
			t.Errorf("%s: %v", c.id(), err)
			continue
		}
		var eps []string
		for _, b := range m.backends {
			eps = append(eps, b.addr.String())
			if !inDocRanges(b.addr.Addr()) {
				t.Errorf("%s: endpoint %s is not in a documentation range", c.id(), b.addr)
			}
		}
		for _, ip := range m.clusterIPs {
			if !inDocRanges(ip) {
				t.Errorf("%s: cluster IP %s is not in a documentation range", c.id(), ip)
			}
		}
		if c.notApplicable == "" && len(c.phases) == 0 {
			t.Errorf("%s: no flows and no reason", c.id())
		}
		for _, ph := range c.phases {
			for _, f := range ph.flows {
				dst, err := netip.ParseAddrPort(f.to)
				if err != nil {
					t.Errorf("%s %q: destination: %v", c.id(), f.name, err)
				} else if !inDocRanges(dst.Addr()) {
					t.Errorf("%s %q: destination %s is not in a documentation range", c.id(), f.name, dst)
				}
				for _, want := range []string{f.want, f.kproxyWant} {
					switch want {
					case "", wantReject, wantDrop, wantNone:
						continue
					}
					for _, ep := range strings.Fields(want) {
						if !slices.Contains(eps, ep) {
							t.Errorf("%s %q: wants %s, not an endpoint of %s", c.id(), f.name, ep, c.manifest)
						}
					}
				}
				if (f.differs == "") != (f.kproxyWant == "") {
					t.Errorf("%s %q: a difference needs both its reason and kproxy's answer", c.id(), f.name)
				}
			}
		}
	}
	for _, f := range files {
		if !used[f.Name()] {
			t.Errorf("testdata/%s is in no case", f.Name())
		}
	}
	for _, ips := range []map[source]netip.Addr{sourceIPs4, sourceIPs6} {
		for s, ip := range ips {
			if !inDocRanges(ip) {
				t.Errorf("source %s %s is not in a documentation range", s, ip)
			}
		}
	}
}
