//go:build unix && !linux

package datapath

import "errors"

// setMark: socket marks are Linux's; only Linux's kernel portals use them.
func setMark(int, int) error { return errors.New("socket marks need Linux") }
