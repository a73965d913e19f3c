package main

import (
	"os"
	"syscall"
)

// reexecWithSysmonSetting makes the process run with sysmonSetting:
// GODEBUG's schedtrace is read only when the runtime starts, so the
// process executes itself again (the same binary, arguments and pid) with
// it added. It returns only when the setting is there already, or the
// exec failed (the process then runs as it is, with Go's default).
func reexecWithSysmonSetting() {
	env, changed := withSysmonSetting(os.Environ())
	if !changed {
		return
	}
	// /proc/self/exe: the binary this process runs, also when its path
	// was replaced meanwhile (an upgrade in place).
	syscall.Exec("/proc/self/exe", os.Args, env)
}
