// Package faults injects faults into a running actor tree (package
// actors), for the admin API (kproxy run --enable-fault-injection,
// kproxy chaos) and tests: crashes of one actor, storms of them, endpoint
// dial faults, kernel rule transactions that fail, and listener faults.
//
// The tree offers the primitives (Proxy.Crash, CrashTop, CrashIn, the
// data path's datapath.Faults, a rules.Faulty in front of the kernel
// rules); this package is the policy over them: what a storm crashes and
// how fast, which faults need what, and counting, logging and the
// kproxy_faults_injected_total metric of every fault it injects.
//
//   - injector.go: the Injector, Prepare (a Config for a tree that takes
//     faults) and the counts the admin API shows;
//   - crash.go: one actor crashed;
//   - chaos.go: storms of crashes over actor kinds, seeded;
//   - datapath.go: endpoint dial faults and listener faults;
//   - rules.go: kernel rule transactions that fail.
package faults
