// Package balancer holds the pure load-balancing logic of the proxy: a
// round-robin endpoint picker and a ClientIP session-affinity table, both
// modelled on kube-proxy's userspace mode, kept per traffic scope and IP
// family (Scopes, ScopedAffinity), outlier detection after Envoy's
// (Outliers), and the read-only Snapshot of them that connections pick
// from (snapshot.go).
//
// The state (RoundRobin, Scopes, AffinityTable, ScopedAffinity, Outliers)
// is not safe for concurrent use, by design: each value is owned by one
// actor of one service port, the only goroutine that touches it, so no
// locking is done or needed. The exceptions are what connections share:
// a Snapshot's Pick and a SnapshotHolder are safe for concurrent use (an
// atomic pointer and atomic round-robin positions, no lock).
package balancer

// contains reports whether s is in list. Exclude lists are tiny (the
// endpoints a single connection already failed to dial), so a linear scan
// beats building a set and does not allocate.
func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
