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

// RaiseFDLimit lifts this process's open-file limit as far as the kernel
// allows (root only; otherwise the hard limit stands): a hollow round's
// core holds a few sockets per node, and a host a few per node it runs.
func RaiseFDLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Max < 1<<20 {
		l.Cur, l.Max = 1<<20, 1<<20
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
