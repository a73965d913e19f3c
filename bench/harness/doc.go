// Package harness is kproxy's benchmark harness, run as `kproxy bench`:
// scenarios (ports, startup, churn, chaos) against the kproxy under test
// started as a separate process, so its CPU, RSS and fds can be read from
// /proc, and optionally against HAProxy and direct connections in the same
// run. Everything runs on one machine over real loopback sockets: backends
// on 127.1.0.0/16, kproxy's service IPs in 127.2.0.0/16, HAProxy's
// frontends in 127.3.0.0/16 and the bare UDP relay's in 127.4.0.0/16, so
// they never share an address.
package harness
