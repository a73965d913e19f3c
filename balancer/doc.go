// Package balancer holds the pure load-balancing logic of the proxy: a
// round-robin endpoint picker and a ClientIP session-affinity table, both
// modelled on kube-proxy's userspace mode, kept per traffic scope and IP
// family (Scopes, ScopedAffinity), and outlier detection after Envoy's
// (Outliers).
//
// Nothing here is safe for concurrent use, by design: each value is owned by
// exactly one actor (one per service port), which is the only goroutine that
// ever touches it, so no locking is done or needed. Do not share a
// RoundRobin or an AffinityTable between goroutines.
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
