package main

import "strings"

// sysmonSetting keeps Go's system monitor thread (sysmon) out of its deep
// sleep. A proxy's load comes in bursts: between them every P is idle and
// sysmon sleeps until the next system call made through syscall.Syscall
// (Go's accept, connect, close), which wakes it and resets its period to
// 20 µs, so it polls at that rate for a millisecond after each burst and
// again after the next. That polling (nanosleep, and the futex wakeups
// that go with it) is a noticeable share of kproxy's CPU under
// connection-per-request and keep-alive loads. With schedtrace set
// sysmon never takes the deep sleep: it backs off to its 10 ms period and
// stays there unless it has taken a P from a blocked system call. The
// value is the longest interval (int32 ms, 24.8 days), so the scheduler
// trace itself is printed to stderr once when the node's uptime exceeds
// it (and every 24.8 days after); on a fatal runtime error the crash
// report also includes the scheduler's state.
const sysmonSetting = "schedtrace=2147483647"

// godebugKey is the GODEBUG key of sysmonSetting.
const godebugKey = "schedtrace"

// withSysmonSetting returns env with sysmonSetting added to GODEBUG, and
// true; or env and false when GODEBUG sets schedtrace already (the
// operator's choice: schedtrace=0 turns this off).
func withSysmonSetting(env []string) ([]string, bool) {
	godebug, found := "", false
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			out = append(out, kv)
			continue
		}
		if !found { // the first one is what os.Getenv (and the runtime) reads
			godebug, found = v, true
		}
	}
	for _, field := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(field, "="); strings.TrimSpace(k) == godebugKey {
			return env, false
		}
	}
	if godebug != "" {
		godebug += ","
	}
	return append(out, "GODEBUG="+godebug+sysmonSetting), true
}
