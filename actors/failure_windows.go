package actors

import (
	"syscall"

	"golang.org/x/sys/windows"

	"github.com/kproxy/kproxy/messages"
)

// Winsock answers with WSA codes; Go's syscall package answers with its own
// errnos for a few conditions (EAFNOSUPPORT when IPv6 is unavailable), and
// the Win32 ERROR_* codes mean the same for files.
var errnoCodes = []errnoCode{
	{windows.WSAEADDRINUSE, messages.FailureCode_ADDRESS_IN_USE},
	{windows.WSAEADDRNOTAVAIL, messages.FailureCode_ADDRESS_NOT_AVAILABLE},
	{windows.WSAEMFILE, messages.FailureCode_FD_EXHAUSTED},
	{windows.ERROR_TOO_MANY_OPEN_FILES, messages.FailureCode_FD_EXHAUSTED},
	{windows.WSAEACCES, messages.FailureCode_PERMISSION_DENIED},
	{windows.ERROR_ACCESS_DENIED, messages.FailureCode_PERMISSION_DENIED},
	{windows.WSAEAFNOSUPPORT, messages.FailureCode_FAMILY_UNAVAILABLE},
	{syscall.EAFNOSUPPORT, messages.FailureCode_FAMILY_UNAVAILABLE},
}
