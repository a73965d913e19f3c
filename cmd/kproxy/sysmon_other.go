//go:build !linux

package main

// reexecWithSysmonSetting does nothing: measured on Linux only.
func reexecWithSysmonSetting() {}
