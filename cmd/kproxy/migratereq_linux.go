package main

import (
	"os"
	"strings"

	"github.com/rs/zerolog"
)

const migrateReqSysctl = "/proc/sys/net/ipv4/tcp_migrate_req"

// enableMigrateReq turns on net.ipv4.tcp_migrate_req (Linux 5.14+, per
// network namespace): when this process (or its predecessor) closes a
// listening socket of an SO_REUSEPORT group, the connections in its accept
// queue move to another socket of the group instead of being reset.
func enableMigrateReq(log zerolog.Logger) {
	cur, err := os.ReadFile(migrateReqSysctl)
	if err != nil {
		log.Warn().Err(err).Msg("kernel without tcp_migrate_req: connections queued on a closing listener are reset during a hand-over")
		return
	}
	if strings.TrimSpace(string(cur)) == "1" {
		return
	}
	if err := os.WriteFile(migrateReqSysctl, []byte("1"), 0o644); err != nil {
		log.Warn().Err(err).Msg("cannot set net.ipv4.tcp_migrate_req=1: connections queued on a closing listener are reset during a hand-over")
		return
	}
	log.Info().Msg("net.ipv4.tcp_migrate_req=1: queued connections move to the next kproxy's sockets during a hand-over")
}
