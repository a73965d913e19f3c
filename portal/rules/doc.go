// Package rules is the model of kproxy's kernel portal rules and what every
// kernel mode shares:
//
//   - rule.go: a Rule (service IP:port or node port -> proxy port, or
//     reject) and its Key;
//   - servicerules.go: the rules of one service port (ForServicePort,
//     Rejects) and the clash check across service ports (Flatten);
//   - plan.go: the diff planner (a programmed Set, Plan, Commit);
//   - interface.go: the Interface each mode implements, and fake.go, a Fake
//     of it for tests, as knftables ships one;
//   - options.go, exec.go, comment.go: options, the exec seam, comments.
//
// The modes are its subpackages nftables, iptables and netsh, one per
// kernel mode as in kube-proxy's pkg/proxy.
package rules
