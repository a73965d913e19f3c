package datapath

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// synTimeout is how long the kernel keeps retransmitting an unanswered
// SYN before a connect fails: the initial RTO of 1 s doubling with each
// of net.ipv4.tcp_syn_retries retransmissions (6: 127 s). Where that
// setting cannot be read, Linux's default.
var synTimeout = sync.OnceValue(func() time.Duration {
	retries := 6
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_syn_retries"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 30 {
			retries = n
		}
	}
	return synTimeoutFor(retries)
})

// synTimeoutFor is the time to give up on a SYN with retries
// retransmissions: 1 s, then each wait doubled, up to TCP_RTO_MAX (120 s).
func synTimeoutFor(retries int) time.Duration {
	var total time.Duration
	rto := time.Second
	for range retries + 1 {
		total += rto
		rto = min(2*rto, 120*time.Second)
	}
	return total
}
