package datapath

import "syscall"

// reusePort does nothing on Windows: its SO_REUSEADDR would let any
// process steal the port, and a successor process cannot share it.
func reusePort(_, _ string, _ syscall.RawConn) error { return nil }

// socketOptions: no socket marks on Windows.
func socketOptions(int) func(network, address string, c syscall.RawConn) error { return reusePort }

// breakSocket is not offered on Windows.
func breakSocket(syscall.RawConn) error { return syscall.EWINDOWS }
