// Package rulestest holds what the kernel modes' tests share: the
// end-to-end scenario every mode must pass in network namespaces
// (scenario_linux.go) and small constructors of rules.
package rulestest
