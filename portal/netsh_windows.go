//go:build windows

package portal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// NewNetsh returns the netsh portal for o.Interface (default
// $INTERFACE_TO_ADD_SERVICE_IP, else DefaultNetshInterface). It checks that
// netsh can list the interface's addresses; it adds nothing: call Sync.
// netsh needs an elevated (administrator) process.
func NewNetsh(ctx context.Context, o RulesOptions) (*Netsh, error) {
	if _, err := exec.LookPath("netsh"); err != nil {
		return nil, fmt.Errorf("netsh: %w", err)
	}
	n := newNetsh(o, runCommand, os.Getenv)
	if _, err := n.present(ctx); err != nil {
		return nil, fmt.Errorf("netsh interface %q: %w", n.iface, err)
	}
	return n, nil
}

func newNetshRules(ctx context.Context, o RulesOptions) (Rules, error) {
	return NewNetsh(ctx, o)
}
