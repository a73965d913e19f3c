//go:build !linux

package policyroute

// Ensure, Present and Remove do nothing where the kernel modes do not run.
func Ensure() error          { return nil }
func Present() (bool, error) { return true, nil }
func Remove() error          { return nil }
