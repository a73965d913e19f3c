//go:build unix

package filesource

import (
	"os"
	"syscall"
)

// inode identifies the file behind info: a file replaced by rename gets a
// new one even when its size and (coarse) mtime match the old file's.
func inode(info os.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
