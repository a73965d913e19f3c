package steer

// SocketMark marks kproxy's proxy-port sockets in kernel modes: the rules
// deliver redirected traffic only to a socket that carries it, so no other
// process can take that traffic by binding a proxy port while kproxy is
// down. Setting it needs CAP_NET_ADMIN, which an unprivileged process
// lacks. Bit 21: clear of kube-proxy's 0x4000 and 0x8000.
const SocketMark = 0x00200000
