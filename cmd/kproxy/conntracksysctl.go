package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// conntrackFlags are kube-proxy's connection-tracking settings, its flags
// and its configuration's conntrack section with its defaults: a node
// behind kproxy tracks connections as one behind kube-proxy does (a
// connection half-closed by its peer is forgotten after an hour, not the
// kernel's minute; an idle established one after a day).
type conntrackFlags struct {
	maxPerCore, min              int
	tcpEstablished, tcpCloseWait time.Duration
	tcpBeLiberal                 bool
	udpTimeout, udpStreamTimeout time.Duration
}

func (c *conntrackFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.maxPerCore, "conntrack-max-per-core", 32768, "nf_conntrack_max per CPU, raised to it (never lowered); 0 leaves it alone (it is the whole machine's, not the network namespace's)")
	fs.IntVar(&c.min, "conntrack-min", 131072, "the least nf_conntrack_max --conntrack-max-per-core sets")
	fs.DurationVar(&c.tcpEstablished, "conntrack-tcp-timeout-established", 24*time.Hour, "idle timeout of established TCP connections (nf_conntrack_tcp_timeout_established); 0 leaves it alone")
	fs.DurationVar(&c.tcpCloseWait, "conntrack-tcp-timeout-close-wait", time.Hour, "how long a TCP connection stays tracked in CLOSE_WAIT (nf_conntrack_tcp_timeout_close_wait); 0 leaves it alone")
	fs.BoolVar(&c.tcpBeLiberal, "conntrack-tcp-be-liberal", false, "mark out-of-window TCP packets INVALID no more (nf_conntrack_tcp_be_liberal=1)")
	fs.DurationVar(&c.udpTimeout, "conntrack-udp-timeout", 0, "idle timeout of UNREPLIED UDP flows (nf_conntrack_udp_timeout); 0 leaves it alone")
	fs.DurationVar(&c.udpStreamTimeout, "conntrack-udp-timeout-stream", 0, "idle timeout of ASSURED UDP flows (nf_conntrack_udp_timeout_stream); 0 leaves it alone")
}

// sysctl is one setting under /proc/sys; raise: only ever raised.
type sysctl struct {
	name  string
	value int
	raise bool
}

// settings lists the sysctls to set, in kube-proxy's order, for ncpu CPUs.
func (c *conntrackFlags) settings(ncpu int) []sysctl {
	var s []sysctl
	if c.maxPerCore > 0 {
		s = append(s, sysctl{"net/netfilter/nf_conntrack_max", max(c.maxPerCore*ncpu, c.min), true})
	}
	if c.tcpBeLiberal {
		s = append(s, sysctl{"net/netfilter/nf_conntrack_tcp_be_liberal", 1, false})
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"net/netfilter/nf_conntrack_tcp_timeout_established", c.tcpEstablished},
		{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", c.tcpCloseWait},
		{"net/netfilter/nf_conntrack_udp_timeout", c.udpTimeout},
		{"net/netfilter/nf_conntrack_udp_timeout_stream", c.udpStreamTimeout},
	} {
		if d.d > 0 {
			s = append(s, sysctl{d.name, int(d.d / time.Second), false})
		}
	}
	return s
}

// validate refuses what kube-proxy refuses: negative sizes and timeouts.
func (c *conntrackFlags) validate() error {
	if c.maxPerCore < 0 || c.min < 0 {
		return errors.New("--conntrack-max-per-core and --conntrack-min must not be negative")
	}
	if c.tcpEstablished < 0 || c.tcpCloseWait < 0 || c.udpTimeout < 0 || c.udpStreamTimeout < 0 {
		return errors.New("--conntrack-* timeouts must not be negative")
	}
	return nil
}

// applySysctls writes each setting under root (/proc/sys) whose value
// differs (for a raise, is lower), and returns "name=value" for each one
// written, the settings this kernel does not have (nf_conntrack not
// loaded), and an error naming each setting it could not read or write.
func applySysctls(root string, settings []sysctl) (changed, missing []string, err error) {
	var errs []error
	for _, s := range settings {
		ok, err := applySysctl(root, s)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, strings.ReplaceAll(s.name, "/", "."))
		} else if err != nil {
			errs = append(errs, err)
		} else if ok {
			changed = append(changed, fmt.Sprintf("%s=%d", strings.ReplaceAll(s.name, "/", "."), s.value))
		}
	}
	return changed, missing, errors.Join(errs...)
}

func applySysctl(root string, s sysctl) (bool, error) {
	path := filepath.Join(root, s.name)
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", s.name, err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return false, fmt.Errorf("read %s: %q: %w", s.name, raw, err)
	}
	if cur == s.value || s.raise && cur > s.value {
		return false, nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(s.value)), 0o644); err != nil {
		return false, fmt.Errorf("write %s=%d (now %d): %w", s.name, s.value, cur, err)
	}
	return true, nil
}

// apply sets them at start in a kernel portal mode, where it can (the
// DaemonSet's privileged init container, kproxy setup-node, has set them
// already).
func (c *conntrackFlags) apply(log zerolog.Logger) {
	changed, missing, err := applySysctls("/proc/sys", c.settings(runtime.NumCPU()))
	for _, s := range changed {
		log.Info().Str("sysctl", s).Msg("connection tracking set as kube-proxy sets it")
	}
	if len(missing) > 0 {
		log.Info().Strs("sysctls", missing).Msg("no connection tracking in this kernel yet (nf_conntrack not loaded): left alone")
	}
	if err != nil {
		log.Warn().Err(err).Msg("cannot set connection tracking as kube-proxy does (run kproxy setup-node where /proc/sys is writable)")
	}
}
