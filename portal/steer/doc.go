// Package steer is the contract between the two halves of a portal: the
// kernel rules that steer service traffic to kproxy (portal/rules and its
// modes) and the data path that receives it (package datapath). Both import
// it; neither imports the other, so the rules build, and are tested,
// without the data path.
//
// The contract, each a file:
//
//   - mode.go: the portal modes, and which of them steer with kernel rules;
//   - mark.go: SocketMark, the mark the kernel modes' rules require on the
//     socket that redirected traffic reaches, and that the data path sets
//     on its proxy-port sockets;
//   - transparent.go: TransparentMark, the mark the data path sets on a
//     socket that dials an endpoint from the client's address, and the
//     policy-routing table and rule the rules program for its replies;
//   - network.go: a service protocol's network ("tcp", "udp"), the same
//     for a rule and the socket it redirects to, and ErrUnsupportedProtocol
//     for the rest;
//   - scope.go: which endpoints a service port's second (external) proxy
//     port serves, which the rules' short circuit and the Balancer's
//     endpoints must agree on.
package steer
