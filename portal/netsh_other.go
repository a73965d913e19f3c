//go:build !windows

package portal

import (
	"context"
	"fmt"
	"runtime"
)

func newNetshRules(context.Context, RulesOptions) (Rules, error) {
	return nil, fmt.Errorf("portal mode %s: not available on %s", ModeNetsh, runtime.GOOS)
}
