//go:build !linux

package filesource

// readQuiet cannot ask the kernel whether a file is open for writing here
// (no file leases), so the caller waits for the file to settle instead.
func readQuiet(string) ([]byte, writeState, error) { return nil, kernelCannotTell, nil }
