//go:build !unix

package main

import "github.com/rs/zerolog"

// servingMark is a no-op where files cannot be locked this way: every
// SIGTERM hands over, as without a socket keeper.
type servingMark struct{}

func markServing(string) (*servingMark, error) { return nil, nil }

func (*servingMark) clear() {}

func successorServing(string, *servingMark, zerolog.Logger) bool { return true }
