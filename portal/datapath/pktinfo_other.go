//go:build !linux

package datapath

import "net"

// Reply-address control is Linux-only; elsewhere replies leave from
// whatever address routing picks.
func enablePktinfo(*net.UDPConn) bool { return false }

var pktinfoOOBSize = 0

func replyOOB([]byte) []byte { return nil }
