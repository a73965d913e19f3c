//go:build !linux

package main

import "github.com/rs/zerolog"

// enableMigrateReq: only Linux migrates queued connections between
// SO_REUSEPORT sockets.
func enableMigrateReq(zerolog.Logger) {}
