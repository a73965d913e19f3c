// Package bench measures kproxy against baselines measured in the same
// run: a direct connection to the backend, and a bare splice proxy (the
// datapath package's TCP proxy with a fixed endpoint, no actors). Rounds of
// the three alternate so machine noise hits all alike; results are ratios.
package bench
