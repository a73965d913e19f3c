//go:build !linux

package main

import (
	"errors"

	"github.com/rs/zerolog"
)

// errNoMigrateReq: only Linux migrates queued connections between
// SO_REUSEPORT sockets.
var errNoMigrateReq = errors.New("net.ipv4.tcp_migrate_req is Linux's")

func setMigrateReq() (bool, error) { return false, errNoMigrateReq }

func enableMigrateReq(zerolog.Logger) {}
