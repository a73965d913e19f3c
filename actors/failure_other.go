//go:build !windows

package actors

import (
	"syscall"

	"github.com/kproxy/kproxy/messages"
)

var errnoCodes = []errnoCode{
	{syscall.EADDRINUSE, messages.FailureCode_ADDRESS_IN_USE},
	{syscall.EADDRNOTAVAIL, messages.FailureCode_ADDRESS_NOT_AVAILABLE},
	{syscall.EMFILE, messages.FailureCode_FD_EXHAUSTED},
	{syscall.ENFILE, messages.FailureCode_FD_EXHAUSTED},
	{syscall.EACCES, messages.FailureCode_PERMISSION_DENIED},
	{syscall.EPERM, messages.FailureCode_PERMISSION_DENIED},
	{syscall.EAFNOSUPPORT, messages.FailureCode_FAMILY_UNAVAILABLE},
}
