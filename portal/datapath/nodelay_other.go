//go:build !linux

package datapath

// setNoDelay: elsewhere connections are accepted by Go, which sets
// TCP_NODELAY on each.
func setNoDelay(int) {}
