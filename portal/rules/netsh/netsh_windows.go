//go:build windows

package netsh

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/kproxy/kproxy/portal/rules"
)

// New returns the netsh portal for o.Interface (default
// $INTERFACE_TO_ADD_SERVICE_IP, else DefaultInterface). It checks that
// netsh can list the interface's addresses; it adds nothing: call Sync.
// netsh needs an elevated (administrator) process.
func New(ctx context.Context, o rules.Options) (*Rules, error) {
	if _, err := exec.LookPath("netsh"); err != nil {
		return nil, fmt.Errorf("netsh: %w", err)
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(os.Getenv("ProgramData"), "kproxy")
	}
	n := newRules(o, rules.RunCommand, os.Getenv)
	if _, err := n.present(ctx); err != nil {
		return nil, fmt.Errorf("netsh interface %q: %w", n.iface, err)
	}
	return n, nil
}
