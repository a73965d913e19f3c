package netsh

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// recordFile is where the netsh portal lists the service IPs it added, in
// Options.StateDir, so that a later process (a restart after a crash,
// `kproxy cleanup`) can remove them: the interface itself cannot tell them
// from an administrator's.
const recordFile = "netsh-addresses"

// loadRecord reads the addresses a previous process recorded; a missing
// record is empty, an unparsable line is skipped.
func loadRecord(path string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	if path == "" {
		return out
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Fields(string(data)) {
		if ip, err := netip.ParseAddr(line); err == nil {
			out[ip] = true
		}
	}
	return out
}

// writeRecord replaces the record with ips, atomically (a crash leaves
// the old record or the new one, never half of one).
func writeRecord(path string, ips map[netip.Addr]bool) error {
	if path == "" {
		return nil
	}
	if len(ips) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("netsh record: %w", err)
		}
		return nil
	}
	var b strings.Builder
	for _, ip := range sortedAddrs(ips) {
		b.WriteString(ip.String() + "\n")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("netsh record: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("netsh record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("netsh record: %w", err)
	}
	return nil
}
