package harness

import "time"

// ProcStat is one reading of a proxy process from /proc.
type ProcStat struct {
	CPU     time.Duration // user + system time so far
	RSS     int64         // resident bytes
	FDs     int
	Threads int
}
