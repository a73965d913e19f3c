// Package policyroute programs the policy routing of transparent proxying:
// the rule "fwmark TransparentReplyMark lookup TransparentTable" and, in that
// table, "local 0.0.0.0/0 dev lo" and "local ::/0 dev lo", so an
// endpoint's replies to a client address kproxy dialled from (which the
// kernel rules marked from their conntrack entry) are delivered to kproxy's
// socket rather than routed on to the client. The kernel modes call
// Ensure when they sync and Remove on cleanup. Linux only (netlink).
package policyroute
