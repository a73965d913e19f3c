package netsh

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/kproxy/kproxy/portal/rules"
)

// DefaultInterface is the interface winuserspace added service IPs to.
const DefaultInterface = "vEthernet (HNS Internal NIC)"

// Rules is winuserspace's portal: nothing is redirected; every service IP
// (cluster, external, load-balancer) is added to one interface with netsh,
// so that the listeners can bind ServiceIP:port directly (ListenSpecs with
// ModeBind). Node ports need no rule (their listeners bind
// bind-address:nodePort) and are ignored; a Reject rule still adds its IP,
// and with no listener on the port Windows refuses connections by itself.
// ProxyPort is not used. An IP shared by several rules is added once and
// deleted with the last of them.
//
// netsh is not transactional: commands run one by one, and a failure leaves
// the change half done (the caller then syncs).
// Addresses are added with store=active, so ones left behind by a crash are
// gone after a reboot. Until then, the record in Options.StateDir says which
// addresses kproxy added: a later process removes them on Sync (those no
// longer wanted) and Cleanup.
type Rules struct {
	iface string
	run   rules.Exec
	// record is the record file's path ("" for none); owned is what it
	// lists: every address kproxy added and has not deleted since, this
	// process or one before it.
	record string
	owned  map[netip.Addr]bool
	mu     sync.Mutex
}

var _ rules.Interface = (*Rules)(nil)

func newRules(o rules.Options, run rules.Exec, getenv func(string) string) *Rules {
	iface := o.Interface
	if iface == "" {
		iface = getenv("INTERFACE_TO_ADD_SERVICE_IP")
	}
	if iface == "" {
		iface = DefaultInterface
	}
	var record string
	if o.StateDir != "" {
		record = filepath.Join(o.StateDir, recordFile)
	}
	return &Rules{iface: iface, run: run, record: record, owned: loadRecord(record)}
}

// netshCommands returns the netsh invocations (argv, "netsh" first) that
// delete del and then add add on iface, as /32 and /128 addresses.
func netshCommands(iface string, add, del []netip.Addr) [][]string {
	var cmds [][]string
	for _, ip := range del {
		if ip.Is4() {
			cmds = append(cmds, []string{"netsh", "interface", "ipv4", "delete", "address", "name=" + iface, "address=" + ip.String()})
		} else {
			cmds = append(cmds, []string{"netsh", "interface", "ipv6", "delete", "address", "interface=" + iface, "address=" + ip.String()})
		}
	}
	for _, ip := range add {
		if ip.Is4() {
			cmds = append(cmds, []string{"netsh", "interface", "ipv4", "add", "address", "name=" + iface, "address=" + ip.String(), "mask=255.255.255.255", "store=active"})
		} else {
			cmds = append(cmds, []string{"netsh", "interface", "ipv6", "add", "address", "interface=" + iface, "address=" + ip.String() + "/128", "store=active"})
		}
	}
	return cmds
}

// netshShowCommands list iface's IPv4 and IPv6 addresses.
func netshShowCommands(iface string) [][]string {
	return [][]string{
		{"netsh", "interface", "ipv4", "show", "addresses", "name=" + iface},
		{"netsh", "interface", "ipv6", "show", "addresses", "interface=" + iface},
	}
}

// parseNetshAddresses picks every word of netsh's output that is an IP
// address, which does not depend on the output's language.
func parseNetshAddresses(out string) map[netip.Addr]bool {
	ips := map[netip.Addr]bool{}
	for _, w := range strings.Fields(out) {
		if ip, err := netip.ParseAddr(w); err == nil && ip.Zone() == "" {
			ips[ip.Unmap()] = true
		}
	}
	return ips
}

func (n *Rules) present(ctx context.Context) (map[netip.Addr]bool, error) {
	ips := map[netip.Addr]bool{}
	for _, c := range netshShowCommands(n.iface) {
		out, err := n.run(ctx, nil, c[0], c[1:]...)
		if err != nil {
			return nil, fmt.Errorf("netsh: %w", err)
		}
		for ip := range parseNetshAddresses(string(out)) {
			ips[ip] = true
		}
	}
	return ips, nil
}

// exec deletes del and adds add. The record lists an address before it is
// added and until it is deleted, so a crash in between never loses one.
func (n *Rules) exec(ctx context.Context, add, del []netip.Addr) error {
	if len(add)+len(del) == 0 {
		return nil
	}
	if len(add) > 0 {
		for _, ip := range add {
			n.owned[ip] = true
		}
		if err := writeRecord(n.record, n.owned); err != nil {
			return err
		}
	}
	for _, c := range netshCommands(n.iface, add, del) {
		if _, err := n.run(ctx, nil, c[0], c[1:]...); err != nil {
			return fmt.Errorf("netsh: %w", err)
		}
	}
	if len(del) == 0 {
		return nil
	}
	for _, ip := range del {
		delete(n.owned, ip)
	}
	return writeRecord(n.record, n.owned)
}

// addresses is the service IPs the rules of s use.
func addresses(s rules.Set) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, u := range s.InUse(rules.UseAddress) {
		out[u.IP] = true
	}
	return out
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for ip := range m {
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// Sync adds every service IP of want that the interface lacks and deletes
// the ones kproxy added before that want no longer has.
func (n *Rules) Sync(ctx context.Context, want rules.Set) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	have, err := n.present(ctx)
	if err != nil {
		return err
	}
	used := addresses(want)
	add, del := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for ip := range used {
		if !have[ip] {
			add[ip] = true
		}
	}
	for ip := range n.owned {
		if !used[ip] && have[ip] {
			del[ip] = true
		}
	}
	if err := n.exec(ctx, sortedAddrs(add), sortedAddrs(del)); err != nil {
		return err
	}
	// What kproxy owns now is what want uses: a recorded address no
	// longer on the interface is no one's to delete.
	n.owned = used
	return writeRecord(n.record, n.owned)
}

// Apply adds the IPs that add brings and deletes those no rule uses any
// more (looked up in cur, not counted).
func (n *Rules) Apply(ctx context.Context, cur *rules.Programmed, delRules, addRules []rules.Rule) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	add, del := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	started, stopped := cur.UseChanges(delRules, addRules)
	for _, u := range started {
		if u.Kind == rules.UseAddress {
			add[u.IP] = true
		}
	}
	for _, u := range stopped {
		if u.Kind == rules.UseAddress {
			del[u.IP] = true
		}
	}
	if len(add) > 0 {
		// Skip addresses the interface already has (netsh add would fail).
		have, err := n.present(ctx)
		if err != nil {
			return err
		}
		for ip := range add {
			if have[ip] {
				delete(add, ip)
			}
		}
	}
	return n.exec(ctx, sortedAddrs(add), sortedAddrs(del))
}

// Present reports whether every service IP of cur is on the interface.
func (n *Rules) Present(ctx context.Context, cur rules.Set) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	have, err := n.present(ctx)
	if err != nil {
		return false, err
	}
	for ip := range addresses(cur) {
		if !have[ip] {
			return false, nil
		}
	}
	return true, nil
}

// Cleanup deletes the service IPs kproxy added, this process or one
// before it (the record).
func (n *Rules) Cleanup(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.owned) == 0 {
		return nil
	}
	have, err := n.present(ctx)
	if err != nil {
		return err
	}
	del := map[netip.Addr]bool{}
	for ip := range n.owned {
		if have[ip] {
			del[ip] = true
		}
	}
	if err := n.exec(ctx, nil, sortedAddrs(del)); err != nil {
		return err
	}
	n.owned = map[netip.Addr]bool{}
	return writeRecord(n.record, nil)
}
