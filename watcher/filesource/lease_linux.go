package filesource

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// readQuiet reads one input file while holding a read lease on it. The
// kernel grants a read lease only while no process has the file open for
// writing, and a writer that opens it while the lease is held waits until
// it is released, so what is read is what a writer left when it closed the
// file. It answers writersOpen when some process still has the file open
// for writing (a generator pausing between writes), and kernelCannotTell
// when leases are not available (a file system without leases, a file
// owned by another user without CAP_LEASE, /proc/sys/fs/leases-enable off).
func readQuiet(name string) ([]byte, writeState, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, kernelCannotTell, fmt.Errorf("read manifests: %w", err)
	}
	defer f.Close()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return nil, writersOpen, nil
		}
		return nil, kernelCannotTell, nil
	}
	defer func() { _, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK) }()
	data, err := readLimited(f, name)
	if err != nil {
		return nil, kernelCannotTell, fmt.Errorf("read manifests: %w", err)
	}
	return data, writersClosed, nil
}
