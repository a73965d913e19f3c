//go:build !windows

package harness

import "syscall"

// terminateSignal asks a proxy to stop cleanly.
var terminateSignal = syscall.SIGTERM
