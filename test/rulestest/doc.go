// Package rulestest holds what the kernel modes' tests share: the
// end-to-end scenario every mode must pass in network namespaces
// (scenario_linux.go), the golden scenario of every kind of rule and
// policy with the changes both kernels must take (golden.go), and small
// constructors of rules.
package rulestest
