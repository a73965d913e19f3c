package main

import (
	"bytes"
	"os"
	"path/filepath"
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
		restoreComm()
		return
	}
	// /proc/self/exe: the binary this process runs, also when its path
	// was replaced meanwhile (an upgrade in place).
	syscall.Exec("/proc/self/exe", os.Args, env)
}

// restoreComm gives the process back the name ps, top and pgrep show:
// an exec names it after the path it was given, "exe" for the re-exec;
// the first exec named it after the binary, as argv[0] does.
func restoreComm() {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil || !bytes.Equal(bytes.TrimSpace(comm), []byte("exe")) || len(os.Args) == 0 {
		return
	}
	name := filepath.Base(os.Args[0])
	if len(name) > 15 { // TASK_COMM_LEN less its NUL, as exec cuts it
		name = name[:15]
	}
	if name != "exe" {
		os.WriteFile("/proc/self/comm", []byte(name), 0)
	}
}
