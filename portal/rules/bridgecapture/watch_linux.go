//go:build linux

package bridgecapture

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/vishvananda/netlink"
	"sigs.k8s.io/knftables"
)

// Bridges lists this node's bridges that are up, with their prefixes
// (link-local ones left out), those of a family br_netfilter does not
// pass to the IP hooks left out too (nothing would mark their replies).
func Bridges() ([]Bridge, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	v4, v6 := bridgeNFCall("iptables"), bridgeNFCall("ip6tables")
	var out []Bridge
	for _, l := range links {
		a := l.Attrs()
		if l.Type() != "bridge" || a.Flags&net.FlagUp == 0 || len(a.HardwareAddr) == 0 {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, err
		}
		b := Bridge{Name: a.Name, MAC: a.HardwareAddr}
		for _, ad := range addrs {
			p, ok := netip.AddrFromSlice(ad.IP)
			if !ok || p.IsLinkLocalUnicast() {
				continue
			}
			p = p.Unmap()
			if p.Is4() && !v4 || p.Is6() && !v6 {
				continue
			}
			ones, _ := ad.Mask.Size()
			b.Prefixes = append(b.Prefixes, netip.PrefixFrom(p, ones).Masked())
		}
		slices.SortFunc(b.Prefixes, func(x, y netip.Prefix) int { return strings.Compare(x.String(), y.String()) })
		b.Prefixes = slices.Compact(b.Prefixes)
		if len(b.Prefixes) > 0 {
			out = append(out, b)
		}
	}
	return out, nil
}

// bridgeNFCall reports whether br_netfilter passes bridged packets to the
// IP hooks of family (iptables, ip6tables) in this network namespace.
func bridgeNFCall(family string) bool {
	b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-" + family)
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// Start programs the capture for this node's bridges before it returns
// (so a restarted kproxy serves with it from its first connection), and
// again each time a link or an address changes (a CNI creates its bridge
// with the first pod), until ctx ends; programmed is told the bridges
// whose replies come up after each change. The table is left in place at
// the end, as the other rules are for the next process.
func Start(ctx context.Context, mark uint32, programmed func([]Bridge), log zerolog.Logger) error {
	nft, err := knftables.New(knftables.BridgeFamily, Table)
	if err != nil {
		return err
	}
	// Subscribed before the first listing: no change falls between.
	links := make(chan netlink.LinkUpdate, 16)
	addrs := make(chan netlink.AddrUpdate, 16)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(links, done); err != nil {
		close(done)
		return err
	}
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		close(done)
		return err
	}
	var cur []Bridge
	sync := func(first bool) {
		bs, err := Bridges()
		if err != nil {
			log.Warn().Err(err).Msg("bridge capture: cannot list this node's bridges")
			return
		}
		if !first && slices.EqualFunc(bs, cur, Bridge.Equal) {
			return
		}
		if err := Program(ctx, nft, mark, bs); err != nil {
			log.Warn().Err(err).Msg("bridge capture: rules not programmed; pods on one bridge are dialled from the node's address")
			programmed(nil)
			return
		}
		cur = bs
		programmed(bs)
		names := make([]string, len(bs))
		for i, b := range bs {
			names[i] = b.Name
		}
		log.Info().Strs("bridges", names).Msg("bridge capture: replies of pods on these bridges come up to kproxy")
	}
	sync(true)
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-links:
				if !ok {
					return
				}
			case _, ok := <-addrs:
				if !ok {
					return
				}
			}
			drain(links, addrs)
			sync(false)
		}
	}()
	return nil
}

// drain takes the updates already queued: one listing covers them all.
func drain(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate) {
	for {
		select {
		case <-links:
		case <-addrs:
		default:
			return
		}
	}
}

// Cleanup removes the table (kproxy cleanup); without nft there is none.
func Cleanup(ctx context.Context) error {
	nft, err := knftables.New(knftables.BridgeFamily, Table)
	if err != nil {
		return nil
	}
	return Remove(ctx, nft)
}
