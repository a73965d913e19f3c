//go:build linux

package bridgecapture

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// Program replaces the table's rules with those for bridges: frames
// carrying mark (set by the transparent rules on replies to kproxy's own
// connections) addressed to a bridge's prefixes go up to this host. No
// bridge leaves the table with an empty chain.
func Program(ctx context.Context, nft knftables.Interface, mark uint32, bridges []Bridge) error {
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("kproxy: replies to kproxy's connections from pods, brought up from their bridge")})
	tx.Flush(&knftables.Table{})
	tx.Add(&knftables.Chain{
		Name:     chain,
		Type:     knftables.PtrTo(knftables.FilterType),
		Hook:     knftables.PtrTo(knftables.PreroutingHook),
		Priority: knftables.PtrTo(knftables.BaseChainPriority(priority)),
	})
	for _, b := range bridges {
		for _, p := range b.Prefixes {
			family := "ip"
			if p.Addr().Is6() {
				family = "ip6"
			}
			tx.Add(&knftables.Rule{
				Chain: chain,
				Rule: knftables.Concat(
					family, "daddr", p,
					fmt.Sprintf("meta mark & 0x%08x != 0x00000000", mark),
					"meta pkttype set host",
					"ether daddr set", b.MAC.String(),
				),
				Comment: knftables.PtrTo(b.Name),
			})
		}
	}
	if err := nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("program bridge capture: %w", err)
	}
	return nil
}

// Remove deletes the table; none there is no error.
func Remove(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("remove bridge capture: %w", err)
	}
	return nil
}
