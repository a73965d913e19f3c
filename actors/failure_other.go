//go:build !windows

package actors

import "syscall"

// The errnos behind each failure code (see errnoCodes).
const (
	errAddrInUse     = syscall.EADDRINUSE
	errAddrNotAvail  = syscall.EADDRNOTAVAIL
	errTooManyFiles  = syscall.EMFILE
	errFileTableFull = syscall.ENFILE
	errAccess        = syscall.EACCES
	errPerm          = syscall.EPERM
	errAFNoSupport   = syscall.EAFNOSUPPORT
)
