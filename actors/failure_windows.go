package actors

import "golang.org/x/sys/windows"

// The errnos behind each failure code (see errnoCodes). Winsock answers
// with WSA codes; the Win32 ERROR_* codes mean the same for files.
const (
	errAddrInUse     = windows.WSAEADDRINUSE
	errAddrNotAvail  = windows.WSAEADDRNOTAVAIL
	errTooManyFiles  = windows.WSAEMFILE
	errFileTableFull = windows.ERROR_TOO_MANY_OPEN_FILES
	errAccess        = windows.WSAEACCES
	errPerm          = windows.ERROR_ACCESS_DENIED
	errAFNoSupport   = windows.WSAEAFNOSUPPORT
)
