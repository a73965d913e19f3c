//go:build !unix

package filesource

import "os"

// inode is not available here: the stamp relies on size and mtime.
func inode(os.FileInfo) uint64 { return 0 }
