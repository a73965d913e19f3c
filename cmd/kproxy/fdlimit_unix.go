//go:build !windows

package main

import "syscall"

// fdLimit is the process's open-file limit (Go raises the soft limit to
// the hard one at start).
func fdLimit() int64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int64(min(r.Cur, 1<<24))
}
