package main

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

// addrInUse reports whether a listen failed because the address is taken:
// Winsock says so with its own code, not syscall.EADDRINUSE.
func addrInUse(err error) bool {
	return errors.Is(err, windows.WSAEADDRINUSE) || errors.Is(err, syscall.EADDRINUSE)
}
