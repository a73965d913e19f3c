package steer

// Transparent proxying: kproxy dials a node-local endpoint from the
// client's own address (IP_TRANSPARENT), so the endpoint's replies are
// addressed to the client and the node would route them on to it. The
// data path sets TransparentMark on those upstream sockets; the kernel
// rules save it in the connection's conntrack entry on the way out and,
// on the replies before routing, set TransparentReplyMark, which a
// policy-routing rule (fwmark TransparentReplyMark lookup
// TransparentTable, priority TransparentRulePriority) sends to a table
// whose only route is "local 0.0.0.0/0 dev lo" (and ::/0): that delivers
// them to kproxy's socket. Two marks, because the rule must not match the
// socket's own packets (their route to the endpoint would be local too).
// Bits 22 and 23: clear of kube-proxy's 0x4000 and 0x8000 and of
// SocketMark.
const (
	TransparentMark         = 0x00400000
	TransparentReplyMark    = 0x00800000
	TransparentTable        = 0x6b70 // 27504, "kp"
	TransparentRulePriority = 0x6b70 // before main (32766) and default (32767)
)
