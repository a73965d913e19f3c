//go:build linux

package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchListeners reports, per address, when a listening TCP socket on it
// first appeared (measured from start): the time a port listens, seen
// without connecting to it. It asks the kernel for listening sockets only
// (sock_diag with a LISTEN state filter, which walks only the listening
// table: cheap with thousands of ports, unlike reading /proc/net/tcp,
// which walks every socket and slowed the proxies it watched). It scans
// until every address listens or ctx ends; then it calls onAll, if set,
// before times returns.
func watchListeners(ctx context.Context, addrs []string, start time.Time, onAll func()) (*listenWatch, error) {
	keys := make(map[netip.AddrPort]int, len(addrs))
	for i, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("watch listeners: %q is not IPv4 address:port", a)
		}
		keys[ap] = i
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("watch listeners: netlink: %w", err)
	}
	// One scan now: a netlink socket that cannot dump is reported here.
	if err := dumpListeners(fd, func(netip.AddrPort) {}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := newListenWatch(len(addrs))
	go func() {
		defer close(w.done)
		defer unix.Close(fd)
		left := len(addrs)
		t := time.NewTicker(listenScanInterval)
		defer t.Stop()
		for left > 0 {
			now := time.Since(start)
			err := dumpListeners(fd, func(ap netip.AddrPort) {
				if i, ok := keys[ap]; ok && w.seen[i] == 0 {
					w.seen[i] = now
					w.order <- i
					left--
				}
			})
			if err != nil {
				w.giveUp()
				return
			}
			if left == 0 {
				break
			}
			select {
			case <-ctx.Done():
				w.giveUp()
				return
			case <-t.C:
			}
		}
		if onAll != nil {
			onAll()
		}
	}()
	return w, nil
}

// dumpListeners calls fn with every listening IPv4 TCP socket's address.
func dumpListeners(fd int, fn func(netip.AddrPort)) error {
	// nlmsghdr (16 bytes) + inet_diag_req_v2 (56 bytes): family, protocol,
	// ext, pad, states (a bit per TCP state), then a zero socket id.
	req := make([]byte, 16+56)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], 1)
	req[16], req[17] = unix.AF_INET, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(req[20:], 1<<unix.BPF_TCP_LISTEN)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag request: %w", err)
	}
	buf := make([]byte, 256<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				return fmt.Errorf("sock_diag: the kernel answered an error")
			}
			// inet_diag_msg: family, state, timer, retrans, then the
			// socket id: sport (big-endian), dport, src (16 bytes).
			d := m.Data
			if len(d) < 24 {
				continue
			}
			port := binary.BigEndian.Uint16(d[4:])
			fn(netip.AddrPortFrom(netip.AddrFrom4([4]byte(d[8:12])), port))
		}
	}
}
