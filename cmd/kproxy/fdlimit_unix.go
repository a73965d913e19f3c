//go:build !windows

package main

import (
	"syscall"

	"github.com/rs/zerolog"
)

// raiseFDLimit raises the open-file soft limit to the hard limit, as
// HAProxy and Envoy do, and logs both: every service port address is a
// socket, so 10,000 service ports need 10,000 fds before any connection.
// (Go's runtime raises it for itself at start too; this makes it explicit
// and visible.) It returns the limit now in force.
func raiseFDLimit(log zerolog.Logger) int64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		log.Warn().Err(err).Msg("cannot read the open-file limit (RLIMIT_NOFILE); assuming 1024")
		return 1024
	}
	if r.Cur < r.Max {
		was := r.Cur
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			log.Warn().Err(err).Uint64("soft", uint64(was)).Uint64("hard", uint64(r.Max)).Msg("cannot raise the open-file soft limit to the hard limit")
			r.Cur = was
		}
	}
	log.Info().Uint64("soft", uint64(r.Cur)).Uint64("hard", uint64(r.Max)).
		Msg("open-file limit (RLIMIT_NOFILE): each service port address takes one fd, each proxied TCP connection two to four")
	return fdLimit()
}

// fdLimit is the process's open-file soft limit.
func fdLimit() int64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int64(min(r.Cur, 1<<24))
}
