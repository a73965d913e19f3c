package harness

import "time"

// ProcStat is one reading of a proxy process from /proc.
type ProcStat struct {
	CPU     time.Duration // user + system time so far
	RSS     int64         // resident bytes
	FDs     int
	Threads int
}

// ProcessCPU is a process's CPU time so far (user and system, from /proc):
// what a test reads of a process the harness does not run, such as the
// API server of a churn through Kubernetes.
func ProcessCPU(pid int) (time.Duration, error) {
	st, err := readProc(pid)
	return st.CPU, err
}

// ProcessRSS is a process's resident bytes (from /proc).
func ProcessRSS(pid int) (int64, error) {
	st, err := readProc(pid)
	return st.RSS, err
}
