package watcher

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// readQuiet reads the inputs while holding a read lease on each file. The
// kernel grants a read lease only while no process has the file open for
// writing, and a writer that opens it while the lease is held waits until
// it is released, so what is read is what a writer left when it closed the
// file. It answers writersOpen when some process still has a file open for
// writing (a generator pausing between writes), and kernelCannotTell when
// leases are not available (a file system without leases, a file owned by
// another user without CAP_LEASE, /proc/sys/fs/leases-enable off).
func readQuiet(path string) ([]input, writeState, error) {
	files, err := inputFiles(path)
	if err != nil {
		return nil, kernelCannotTell, err
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
			f.Close()
		}
	}()
	inputs := make([]input, 0, len(files))
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, kernelCannotTell, fmt.Errorf("read manifests: %w", err)
		}
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
			f.Close()
			if errors.Is(err, unix.EAGAIN) {
				return nil, writersOpen, nil
			}
			return nil, kernelCannotTell, nil
		}
		held = append(held, f)
		data, err := readLimited(f, name)
		if err != nil {
			return nil, kernelCannotTell, fmt.Errorf("read manifests: %w", err)
		}
		inputs = append(inputs, input{name: name, data: data})
	}
	return inputs, writersClosed, nil
}
