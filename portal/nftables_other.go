//go:build !linux

package portal

import (
	"context"
	"fmt"
	"runtime"
)

func newNftablesRules(context.Context, RulesOptions) (Rules, error) {
	return nil, fmt.Errorf("portal mode %s: not available on %s", ModeNftables, runtime.GOOS)
}
