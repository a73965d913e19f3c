package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// DefaultPollInterval is used when NewFileSource gets a non-positive interval.
const DefaultPollInterval = time.Second

// FileSource reloads a manifest file or directory whenever its content
// changes.
//
// It polls instead of using inotify: editors and ConfigMap volumes replace
// files by rename, which file watches follow poorly, while a periodic stat
// of a handful of files costs nothing. A changed stat (name, size, mtime)
// only triggers a re-read; a result is emitted only when the content hash
// differs from what was last emitted, so a touch or an identical rewrite
// does not cause a reload downstream.
type FileSource struct {
	path     string
	opts     Options
	interval time.Duration
	log      zerolog.Logger

	// polled, when set, is called after each poll. Tests use it to wait for
	// a poll without sleeping.
	polled func()
}

// NewFileSource prepares a source for path (a file or a directory, as for
// LoadPath) polled every interval.
func NewFileSource(path string, opts Options, interval time.Duration, log zerolog.Logger) *FileSource {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	return &FileSource{path: path, opts: opts, interval: interval, log: log}
}

// pollState is what one Run remembers between polls.
type pollState struct {
	stamp   string // stat fingerprint of the inputs last read
	stamped bool
	hash    [sha256.Size]byte // content hash of the last emitted result
	emitted bool
	lastErr string // last path error logged, to log each failure once
}

// Run loads the path immediately and emits the result, then polls until
// ctx is done, emitting each time the content changes. emit is called from
// Run's goroutine. When the path cannot be read at all (missing, or a file
// mid-replacement) nothing is emitted and the previous result stays
// current: an empty result would tell the consumer to delete every service.
func (s *FileSource) Run(ctx context.Context, emit func(*Result)) {
	var st pollState
	s.poll(ctx, &st, emit)
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.poll(ctx, &st, emit)
		}
	}
}

// poll performs one check, reading and parsing only when needed.
func (s *FileSource) poll(ctx context.Context, st *pollState, emit func(*Result)) {
	if s.polled != nil {
		defer s.polled()
	}
	// Stat before reading: a change racing with the read then shows up as
	// a new stamp on the next poll instead of being missed.
	stamp, err := statStamp(s.path)
	if err != nil {
		st.stamped = false // whatever reappears is read, even with an old stamp
		s.failed(st, err)
		return
	}
	if st.stamped && stamp == st.stamp {
		return
	}
	inputs, err := readInputs(s.path)
	if err != nil {
		st.stamped = false // retry on the next poll
		s.failed(st, err)
		return
	}
	st.stamp, st.stamped, st.lastErr = stamp, true, ""

	hash := hashInputs(inputs)
	if st.emitted && hash == st.hash {
		s.log.Debug().Str("path", s.path).Msg("manifests touched but content unchanged")
		return
	}
	res := buildResult(inputs, s.opts)
	st.hash, st.emitted = hash, true

	s.log.Info().Str("path", s.path).Int("files", len(inputs)).
		Int("servicePorts", len(res.ServicePorts)).Int("errors", len(res.Errors)).
		Int("skipped", len(res.Skipped)).Msg("manifests loaded")
	for _, err := range res.Errors {
		s.log.Warn().Err(err).Msg("manifest rejected")
	}
	if ctx.Err() != nil {
		return
	}
	emit(res)
}

// failed logs a path-level failure once, not on every poll.
func (s *FileSource) failed(st *pollState, err error) {
	if msg := err.Error(); msg != st.lastErr {
		st.lastErr = msg
		s.log.Warn().Err(err).Str("path", s.path).Msg("cannot read manifests; keeping the previous state")
	}
}

// statStamp fingerprints the inputs by name, size and modification time,
// which changes whenever a file is written, replaced, added or removed.
func statStamp(path string) (string, error) {
	files, err := inputFiles(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("stat manifests: %w", err)
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", f, info.Size(), info.ModTime().UnixNano())
	}
	return b.String(), nil
}

// hashInputs hashes names and contents, length-prefixed so that moving
// bytes from one file to the next still changes the hash.
func hashInputs(inputs []input) [sha256.Size]byte {
	h := sha256.New()
	for _, in := range inputs {
		for _, part := range [][]byte{[]byte(in.name), in.data} {
			_ = binary.Write(h, binary.BigEndian, uint64(len(part)))
			h.Write(part)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
