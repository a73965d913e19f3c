//go:build linux

package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTick = 100

// readProc reads what the kernel accounts for pid: CPU time (user and
// system), resident memory, open fds and threads.
func readProc(pid int) (ProcStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// are counted from the last ')'. After it, index 0 is field 3 (state).
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 22 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	st := ProcStat{
		CPU:     time.Duration(num(11)+num(12)) * time.Second / clockTick, // utime + stime
		Threads: int(num(17)),
		RSS:     num(21) * int64(os.Getpagesize()),
	}
	d, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return st, fmt.Errorf("open /proc/%d/fd: %w", pid, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return st, fmt.Errorf("list /proc/%d/fd: %w", pid, err)
	}
	st.FDs = len(names)
	return st, nil
}

// readAnonRSS is pid's anonymous resident memory (RssAnon in
// /proc/PID/status): heap, stacks and runtime data, without the pages of
// the binary itself, whose residency depends on the page cache (a build
// whose text the kernel maps with a huge page shows megabytes more RSS for
// the same heap), so two builds compare on what they allocate.
func readAnonRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/status: %w", pid, err)
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: RssAnon %q: %w", pid, strings.TrimSpace(v), err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no RssAnon", pid)
}

// readMachineCPU is the time every CPU of the machine spent busy so far
// (/proc/stat: user, nice, system, irq, softirq and steal): a proxy's
// cost includes kernel work accounted to no process of its own (softirq
// processing of its packets, kernel worker threads).
func readMachineCPU() (time.Duration, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	return parseMachineCPU(string(raw))
}

// readProcTree is readProc summed over pid and its descendants (a master
// process's workers), found through each thread's children file.
func readProcTree(pid int) (ProcStat, error) {
	st, err := readProc(pid)
	if err != nil {
		return st, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return st, fmt.Errorf("list /proc/%d/task: %w", pid, err)
	}
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, c := range strings.Fields(string(raw)) {
			child, err := strconv.Atoi(c)
			if err != nil {
				continue
			}
			cs, err := readProcTree(child)
			if err != nil {
				continue // the child ended
			}
			st.CPU += cs.CPU
			st.RSS += cs.RSS
			st.FDs += cs.FDs
			st.Threads += cs.Threads
		}
	}
	return st, nil
}

// SelfCPU is this process's CPU time so far (user and system), to the
// microsecond: a hollow round's core runs in the harness's process, and
// a small round's cost per change is below /proc's 10 ms ticks.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
