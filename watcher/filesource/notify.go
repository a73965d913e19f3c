package filesource

import (
	"context"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// notify watches the path with inotify (fsnotify) and signals on every
// event, so a change is seen at once rather than at the next poll. It
// watches the directory holding the inputs, which also sees files
// replaced by rename (editors, ConfigMap volumes). Polling stays the
// fallback: when the watch cannot be set up, the channel never fires.
// On Linux it also signals when a writer closes a file (see
// watchCloseWrite).
func (s *FileSource) notify(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	dir := s.path
	if info, err := os.Stat(s.path); err != nil || !info.IsDir() {
		dir = filepath.Dir(s.path)
	}
	watchCloseWrite(ctx, dir, signal)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Debug().Err(err).Msg("no file notifications; polling only")
		return out
	}
	if err := w.Add(dir); err != nil {
		s.log.Debug().Err(err).Str("dir", dir).Msg("no file notifications; polling only")
		w.Close()
		return out
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				signal()
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return out
}
