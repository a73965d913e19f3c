package harness

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseMachineCPU reads the busy time of all CPUs from /proc/stat's
// aggregate "cpu" line: user, nice, system, irq, softirq and steal, in
// USER_HZ ticks, 100 a second (guest time is already counted in user). Idle and iowait
// are not busy.
func parseMachineCPU(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: no aggregate cpu line: %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d: %w", i, err)
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / 100, nil
}
