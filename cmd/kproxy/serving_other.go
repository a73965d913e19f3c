//go:build !unix

package main

// servingMark is a no-op where files cannot be locked this way.
type servingMark struct{ path string }

func markServing(string) (*servingMark, error) { return nil, nil }

func (*servingMark) clear() {}

// liveServing finds none: no socket is shared.
func liveServing(string, *servingMark) []string { return nil }

func sameNetNamespace(string) bool { return false }
