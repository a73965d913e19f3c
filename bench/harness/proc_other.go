//go:build !linux

package harness

import (
	"errors"
	"time"
)

// readProc needs Linux's /proc; elsewhere the harness reports no process
// figures.
func readProc(pid int) (ProcStat, error) {
	return ProcStat{}, errors.New("process figures need Linux /proc")
}

func readAnonRSS(pid int) (int64, error) {
	return 0, errors.New("process figures need Linux /proc")
}

func readMachineCPU() (time.Duration, error) {
	return 0, errors.New("machine CPU needs Linux /proc")
}

func readProcTree(pid int) (ProcStat, error) { return readProc(pid) }

// SelfCPU: without Linux the harness reports no process figures.
func SelfCPU() time.Duration { return 0 }
