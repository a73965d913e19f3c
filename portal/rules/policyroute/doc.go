// Package policyroute programs the policy routing of transparent proxying:
// the rule "fwmark TransparentMark lookup TransparentTable" and, in that
// table, "local 0.0.0.0/0 dev lo" and "local ::/0 dev lo", so an
// endpoint's replies to a client address kproxy dialled from (and whose
// conntrack mark the kernel rules restored) are delivered to kproxy's
// socket rather than routed on to the client. The kernel modes call
// Ensure when they sync and Remove on cleanup. Linux only (netlink).
package policyroute
