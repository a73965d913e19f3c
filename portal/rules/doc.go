// Package rules is the model of kproxy's kernel portal rules and what every
// kernel mode shares:
//
//   - rule.go: a Rule (service IP:port or node port -> proxy port, or
//     reject, or drop) and its Key;
//   - servicerules.go: the rules of one service port (ForServicePort), the
//     verdict of each traffic scope (Verdicts) and the clash check across
//     service ports (Flatten);
//   - plan.go: the diff planner (a Set, Desired, Plan, Commit) and the
//     record of what is programmed it runs against (Programmed), which
//     indexes the rules by service port and counts those using each
//     cluster IP, address and proxy port, so a change looks up what it
//     starts and stops using (UseChanges);
//   - interface.go: the Interface each mode implements, a stateless
//     wrapper of its kernel as knftables is, and fake.go, a Fake of it for
//     tests, as knftables ships one; faulty.go wraps an Interface for
//     fault injection;
//   - options.go, exec.go, comment.go: options, the exec seam, comments.
//
// The modes are its subpackages nftables, iptables and netsh, one per
// kernel mode as in kube-proxy's pkg/proxy; conntrack clears the UDP flows
// their changes make stale. What the modes' tests share is test/rulestest.
// None of them imports the data path (package datapath): what both sides
// must agree on is portal/steer.
package rules
