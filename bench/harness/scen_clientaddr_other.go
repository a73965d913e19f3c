//go:build !linux

package harness

import "context"

// runClientAddress needs Linux: network namespaces and the nftables
// portal.
func runClientAddress(ctx context.Context, e *env, res *ScenarioResult) error {
	res.Skipped = "needs Linux (network namespaces, nftables)"
	return nil
}
