package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoteIdleChangeAppliedAtOnce: a core and a node proxy, both with
// --min-sync-period an hour, each a process of its own over remoting: a
// change to the core's source made while both are idle reaches the node
// proxy's connections at once, through the core's flush and the node
// proxy's, neither waiting for its minimum interval.
func TestRemoteIdleChangeAppliedAtOnce(t *testing.T) {
	port := backendsOn(t, "127.0.0.21", "127.0.0.22")
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("paced", "127.0.0.61", 8080, port, [][2]string{{"127.0.0.21", "node-a"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest, "--min-sync-period", "1h")...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	pa := freeTCPPort(t)
	a := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa, "--min-sync-period", "1h")...)
	a.waitLog(t, "source synced", 1, 30*time.Second)
	addr := nodeAddr(pa)
	awaitNames(t, addr, 1, "127.0.0.21")

	for _, ip := range []string{"127.0.0.22", "127.0.0.21"} {
		replaceFile(t, manifest, localService("paced", "127.0.0.61", 8080, port, [][2]string{{ip, "node-a"}}))
		awaitNames(t, addr, 5, ip)
	}
}

// TestRemoteNodeAppliesEachDeltaAtOnce: a node proxy following a core
// applies each delta at once, its own --min-sync-period (an hour here)
// unused: the core paces the deltas (10 ms here), and pacing them twice
// would add a node's period to every change under churn. Four changes one
// after the other, more than a burst, each reaches connections.
func TestRemoteNodeAppliesEachDeltaAtOnce(t *testing.T) {
	port := backendsOn(t, "127.0.0.23", "127.0.0.24")
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	replaceFile(t, manifest, localService("deltas", "127.0.0.62", 8080, port, [][2]string{{"127.0.0.23", "node-a"}}))
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)
	pa := freeTCPPort(t)
	a := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa, "--min-sync-period", "1h")...)
	a.waitLog(t, "source synced", 1, 30*time.Second)
	addr := nodeAddr(pa)
	awaitNames(t, addr, 1, "127.0.0.23")

	for _, ip := range []string{"127.0.0.24", "127.0.0.23", "127.0.0.24", "127.0.0.23"} {
		replaceFile(t, manifest, localService("deltas", "127.0.0.62", 8080, port, [][2]string{{ip, "node-a"}}))
		awaitNames(t, addr, 5, ip)
	}
}
