package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// capNetAdmin is CAP_NET_ADMIN's bit (linux/capability.h).
const capNetAdmin = 12

// requireNetAdmin fails a kernel portal's start when the process lacks
// CAP_NET_ADMIN, the one capability the kernel modes need: nft and
// iptables-nft program rules, proxy-port sockets get their mark
// (SO_MARK), conntrack entries are deleted over netlink. Without it nft
// and iptables only say "Operation not permitted". Where the effective
// set cannot be read, the tools' own errors decide.
func requireNetAdmin(mode string) error {
	eff, ok := effectiveCapabilities("/proc/self/status")
	if !ok || eff&(1<<capNetAdmin) != 0 {
		return nil
	}
	return fmt.Errorf("--portal %s needs CAP_NET_ADMIN (kernel rules, proxy-port socket marks, conntrack), which this process lacks: run it as root with that capability (securityContext.capabilities.add: [NET_ADMIN])", mode)
}

// effectiveCapabilities reads the CapEff line of a /proc/PID/status file.
func effectiveCapabilities(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, found := strings.CutPrefix(s.Text(), "CapEff:"); found {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return eff, err == nil
		}
	}
	return 0, false
}
