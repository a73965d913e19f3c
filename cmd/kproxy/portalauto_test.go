package main

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/kproxy/kproxy/portal/datapath"
)

// The causes an operator acts on, from what nft, the iptables tools and
// netsh say (their messages as seen on Debian bookworm, nft 1.0.6,
// iptables 1.8.9, and Windows).
func TestPortalCause(t *testing.T) {
	for _, c := range []struct {
		mode string
		err  error
		want string
	}{
		{datapath.ModeNftables, fmt.Errorf("nftables: could not find nftables binary: %w", &exec.Error{Name: "nft", Err: exec.ErrNotFound}), "nft (package nftables) not installed"},
		{datapath.ModeIPTables, fmt.Errorf("iptables: iptables-save -t nat: %w: ", &exec.Error{Name: "iptables-save", Err: exec.ErrNotFound}), "iptables-save and iptables-restore (package iptables) not installed"},
		{datapath.ModeNftables, errors.New("nftables: could not run nftables command: /dev/stdin:1:1-20: Error: Could not process rule: Operation not permitted"), "no permission"},
		{datapath.ModeIPTables, errors.New("iptables: iptables-save -t nat: exit status 4: iptables-save v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)"), "no permission"},
		{datapath.ModeNftables, errors.New("nftables: could not run nftables command: /dev/stdin:1:1-20: Error: Could not process rule: Protocol not supported"), "the kernel lacks nf_tables"},
		{datapath.ModeIPTables, errors.New("iptables: iptables-save -t nat: exit status 1: iptables-save v1.8.9 (legacy): can't initialize iptables table `nat': Table does not exist (do you need to insmod?)"), "the kernel lacks iptables' nat table"},
		{datapath.ModeNftables, errors.New("nftables: nft version must be v1.0.1 or later (got nftables v0.9.8 (E.D.S.))"), "nft is too old"},
		{datapath.ModeNftables, errors.New("nftables: something else"), ""},
	} {
		got := portalCause(c.mode, c.err)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s, %q: cause %q, want %q", c.mode, c.err, got, c.want)
		}
	}
}

// auto tries the kernel portals of the OS in order, and bind only where
// the OS has none.
func TestAutoModes(t *testing.T) {
	if got := autoModes("linux"); strings.Join(got, ",") != "nftables,iptables" {
		t.Errorf("linux: %v, want nftables then iptables", got)
	}
	if got := autoModes("windows"); strings.Join(got, ",") != "netsh" {
		t.Errorf("windows: %v, want netsh", got)
	}
	if got := autoModes("darwin"); len(got) != 0 {
		t.Errorf("darwin: %v, want none (bind)", got)
	}
}
