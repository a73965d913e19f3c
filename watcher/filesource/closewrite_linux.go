package filesource

import (
	"context"
	"os"

	"golang.org/x/sys/unix"
)

// watchCloseWrite calls signal whenever a file in dir that was open for
// writing is closed (inotify IN_CLOSE_WRITE), the moment a writer the
// lease check waited for is done. fsnotify does not report this event, so
// it has its own inotify instance. It reports false when inotify is not
// available; the poll interval then bounds the wait.
func watchCloseWrite(ctx context.Context, dir string, signal func()) bool {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return false
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return false
	}
	// Non-blocking, so the runtime poller waits for it and Close ends a Read.
	f := os.NewFile(uintptr(fd), "inotify")
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			signal()
		}
	}()
	return true
}
