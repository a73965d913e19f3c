//go:build !linux

package filesource

import "context"

// watchCloseWrite has nothing to watch here: without leases the source
// does not wait for writers to close.
func watchCloseWrite(context.Context, string, func()) bool { return false }
