//go:build !windows

package harness

import "syscall"

// fdLimit is this process's open-file limit, which the proxies inherit.
func fdLimit() int64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return int64(min(r.Cur, 1<<40))
}
