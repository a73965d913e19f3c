//go:build !linux

package harness

// gsoBurst: UDP_SEGMENT is Linux's; elsewhere a datagram per call.
func (cl *client) gsoBurst(port, burst int) { cl.sendBurst(port, burst) }
