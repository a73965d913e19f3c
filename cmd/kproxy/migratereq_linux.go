package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

const migrateReqSysctl = "/proc/sys/net/ipv4/tcp_migrate_req"

// errNoMigrateReq: the kernel has no net.ipv4.tcp_migrate_req (before 5.14).
var errNoMigrateReq = errors.New("kernel without net.ipv4.tcp_migrate_req (Linux 5.14+)")

// setMigrateReq turns on net.ipv4.tcp_migrate_req (Linux 5.14+, per
// network namespace): when this process (or its predecessor) closes a
// listening socket of an SO_REUSEPORT group, the connections in its accept
// queue move to another socket of the group instead of being reset. It
// reports whether it changed the setting.
func setMigrateReq() (bool, error) {
	cur, err := os.ReadFile(migrateReqSysctl)
	if errors.Is(err, fs.ErrNotExist) {
		return false, errNoMigrateReq
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", migrateReqSysctl, err)
	}
	if strings.TrimSpace(string(cur)) == "1" {
		return false, nil
	}
	if err := os.WriteFile(migrateReqSysctl, []byte("1"), 0o644); err != nil {
		return false, fmt.Errorf("write %s: %w", migrateReqSysctl, err)
	}
	return true, nil
}

// enableMigrateReq sets it at start where it can; without it a hand-over
// still works, but resets the few connections queued on the old sockets.
func enableMigrateReq(log zerolog.Logger) {
	changed, err := setMigrateReq()
	switch {
	case errors.Is(err, errNoMigrateReq):
		log.Warn().Err(err).Msg("kernel without tcp_migrate_req: connections queued on a closing listener are reset during a hand-over")
	case err != nil:
		log.Warn().Err(err).Msg("cannot set net.ipv4.tcp_migrate_req=1: connections queued on a closing listener are reset during a hand-over")
	case changed:
		log.Info().Msg("net.ipv4.tcp_migrate_req=1: queued connections move to the next kproxy's sockets during a hand-over")
	}
}
