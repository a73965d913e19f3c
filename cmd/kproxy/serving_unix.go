//go:build unix

package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The node's serving processes: a file per kproxy process that serves
// (ready), locked by it while it lives (the kernel unlocks it when the
// process dies, kill -9 too). At SIGTERM a process looks for another's
// locked file: there is a successor that serves the same sockets (a
// rollout with surge), so this one closes its listeners and drains; there
// is none (the container alone is restarted: a liveness probe, crictl
// stop; or the pod is deleted), so it leaves its listening sockets to the
// socket keeper, which holds them for the next process or closes them
// when the pod goes, and it exits at once. The directory is beside the
// proxy ports file, the node's (/run/kproxy).

// servingMark is this process's file, locked while it is held.
type servingMark struct {
	dir, path string
	f         *os.File
}

// markServing creates and locks this process's file in dir.
func markServing(dir string) (*servingMark, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("serving mark: %w", err)
	}
	var id [8]byte
	rand.Read(id[:])
	path := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("serving mark: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("serving mark: lock %s: %w", path, err)
	}
	f.WriteString(strconv.Itoa(os.Getpid()) + "\n" + netNamespace() + "\n")
	return &servingMark{dir: dir, path: path, f: f}, nil
}

// netNamespace names this process's network namespace (net:[inode]).
func netNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/net")
	return ns
}

// sameNetNamespace reports whether the process that wrote mark serves the
// same network namespace as this one: sockets of another namespace (a
// node's /run/kproxy shared by mistake, as test clusters once did) would
// serve another node's traffic.
func sameNetNamespace(mark string) bool {
	raw, err := os.ReadFile(mark)
	if err != nil {
		return false
	}
	_, ns, _ := strings.Cut(string(raw), "\n")
	ns = strings.TrimSpace(ns)
	return ns != "" && ns == netNamespace()
}

// clear removes the mark: this process no longer serves.
func (m *servingMark) clear() {
	if m == nil {
		return
	}
	os.Remove(m.path)
	m.f.Close()
}

// liveServing returns the marks in dir of other live processes (held
// locked); marks of dead processes are removed.
func liveServing(dir string, self *servingMark) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var live []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if filepath.Ext(path) == ".sock" || self != nil && path == self.path {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case errors.Is(err, syscall.EWOULDBLOCK):
			live = append(live, path) // held: a live process serves
		case err == nil:
			os.Remove(path) // its process is gone
			os.Remove(path + ".sock")
		}
		f.Close()
	}
	return live
}
