package kubetest

import "syscall"

// sysProcAttr kills the apiserver if the test process dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
