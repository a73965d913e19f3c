package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// DefaultPollInterval is used when NewFileSource gets a non-positive interval.
const DefaultPollInterval = time.Second

// FileSource is the incremental source of a manifest file or directory,
// the file counterpart of KubeSource: it is a View (its Store), and after
// every reload it notifies only the services whose ports changed, so the
// Watcher's Tracker handles both sources the same way.
//
// It watches the inputs' directory (notify) and also polls, since file
// watches miss changes on some file systems while a periodic stat of a
// handful of files costs nothing. A changed stat (name, size, mtime,
// inode) triggers a read once no writer has the files open (readQuiet) or,
// where the kernel cannot tell, once they have settled; a result is used
// only when the content hash differs from the last one, and then only
// services that really changed are notified, so a touch or an identical
// rewrite changes nothing downstream.
type FileSource struct {
	*Store
	path     string
	opts     Options
	interval time.Duration
	log      zerolog.Logger

	stop context.CancelFunc // ends the poller Start began
	done chan struct{}      // closed when it has ended

	// decoded, when set, gets every new read before it is emitted, not
	// yet built for a node (NodesFileSource builds it for each node).
	decoded func(*decodedSet)

	// polled, when set, is called after each poll. Tests use it to wait for
	// a poll without sleeping.
	polled func()

	// writerHold is writerHoldLimit; tests shorten it.
	writerHold time.Duration
}

// NewFileSource prepares a source for path (a file or a directory, as for
// LoadPath) polled every interval.
func NewFileSource(path string, opts Options, interval time.Duration, log zerolog.Logger) *FileSource {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	if opts.TopologyLog == nil {
		opts.TopologyLog = &log
	}
	return &FileSource{Store: NewStore(), path: path, opts: opts, interval: interval, log: log, writerHold: writerHoldLimit}
}

// Start reads the path until one read succeeds, then returns with the
// Store holding it and polls for changes in the background until ctx ends.
// Like KubeSource.Start it returns once the source is complete: nothing
// should be programmed before. notify gets every service whose ports
// changed (from Start's goroutine for the first read, from the poller's
// afterwards) and must only hand the event on.
func (s *FileSource) Start(ctx context.Context, notify func(Event)) error {
	ctx, s.stop = context.WithCancel(ctx)
	s.done = make(chan struct{})
	loaded := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(s.done)
		s.run(ctx, func(r *Result) {
			for _, svc := range s.Replace(r.ServicePorts, r.Retain, r.RetainMissing) {
				notify(Event{Kind: "File", Service: svc})
			}
			once.Do(func() { close(loaded) })
		})
	}()
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the poller Start began and waits for it.
func (s *FileSource) Stop() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}

// pollState is what one run remembers between polls.
type pollState struct {
	stamp   string // stat fingerprint of the inputs last read
	stamped bool
	hash    [sha256.Size]byte // content hash of the last emitted result
	emitted bool
	lastErr string // last path error logged, to log each failure once
	// rejected holds the document errors of the last result, logged once.
	rejected map[string]bool
	// invalidCIDRs are the ignored source ranges of the last result, logged once.
	invalidCIDRs map[string]bool
	// annotationErrors are the unapplied annotations of the last result, logged once.
	annotationErrors map[string]bool
	// A change seen but not read yet: its stamp and when it was first
	// seen. It is read once it has not changed for fileSettle.
	pending      string
	pendingSince time.Time
	heldLogged   bool // the wait for pending's writer was logged
}

// fileSettle is how long a changed file must stay unchanged before it is
// read when the kernel cannot say whether it is still being written: a
// file rewritten in place (truncated, then written) is briefly empty or
// partial, and that is not a state its author wrote. Where the kernel can
// tell (Linux file leases), a file is read once no process has it open for
// writing, however long its writer pauses, and without this delay.
const fileSettle = 100 * time.Millisecond

// writerHoldLimit bounds the wait for a writer to close: a process that
// keeps a manifest open for writing for good (a shell's `exec 3>file`, a
// generator that never closes) must not freeze the source. A change that
// has stayed unchanged this long while still open is read anyway.
const writerHoldLimit = 10 * time.Second

// writeState is what the kernel says about writers of the inputs.
type writeState int

const (
	kernelCannotTell writeState = iota // no leases: wait for fileSettle
	writersOpen                        // some process has an input open for writing
	writersClosed                      // none has; the inputs were read under a lease
)

// run loads the path immediately and emits the result, then polls until
// ctx is done, emitting each time the content changes. emit is called from
// run's goroutine. When the path cannot be read at all (missing, or a file
// mid-replacement) nothing is emitted and the previous result stays
// current: an empty result would tell the consumer to delete every service.
func (s *FileSource) run(ctx context.Context, emit func(*Result)) {
	var st pollState
	changed := s.notify(ctx)
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	settled := time.NewTimer(0) // the first read, once the path is stable
	defer settled.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-changed:
		case <-settled.C:
		}
		if wait := s.poll(ctx, &st, emit); wait > 0 {
			settled.Reset(wait)
		}
	}
}

// poll performs one check, reading and parsing only when needed. It
// returns how long to wait before a change seen now has settled, or 0.
func (s *FileSource) poll(ctx context.Context, st *pollState, emit func(*Result)) time.Duration {
	if s.polled != nil {
		defer s.polled()
	}
	stamp, err := statStamp(s.path)
	if err != nil {
		st.stamped, st.pending = false, "" // whatever reappears is read, even with an old stamp
		s.failed(st, err)
		return 0
	}
	if st.stamped && stamp == st.stamp {
		st.pending = ""
		return 0
	}
	now := time.Now()
	if stamp != st.pending {
		st.pending, st.pendingSince, st.heldLogged = stamp, now, false
	}
	inputs, state, err := readQuiet(s.path)
	if err != nil {
		st.stamped, st.pending = false, "" // retry on the next poll
		s.failed(st, err)
		return 0
	}
	switch stable := now.Sub(st.pendingSince); state {
	case writersOpen:
		// Read once the writer closes (watchCloseWrite wakes the loop),
		// unless it holds the file open, unchanged, for writerHoldLimit.
		if stable < s.writerHold {
			if !st.heldLogged {
				st.heldLogged = true
				s.log.Debug().Str("path", s.path).Msg("manifests open for writing; reading once the writer closes them")
			}
			return s.writerHold - stable
		}
		s.log.Warn().Str("path", s.path).Dur("unchangedFor", stable).
			Msg("manifests still open for writing by another process; reading them anyway")
		fallthrough
	case kernelCannotTell:
		// Read only what has stayed the same for fileSettle.
		if wait := fileSettle - stable; wait > 0 {
			return wait
		}
		if inputs, err = readInputs(s.path); err != nil {
			st.stamped, st.pending = false, "" // retry on the next poll
			s.failed(st, err)
			return 0
		}
	}
	// Changed while being read: wait for it to settle again.
	if after, err := statStamp(s.path); err != nil || after != stamp {
		st.pending = ""
		return fileSettle
	}
	st.stamp, st.stamped, st.lastErr, st.pending = stamp, true, "", ""

	hash := hashInputs(inputs)
	if st.emitted && hash == st.hash {
		s.log.Debug().Str("path", s.path).Msg("manifests touched but content unchanged")
		return 0
	}
	ds := decodeInputs(inputs)
	res := ds.result(s.opts)
	st.hash, st.emitted = hash, true

	s.log.Info().Str("path", s.path).Int("files", len(inputs)).
		Int("servicePorts", len(res.ServicePorts)).Int("errors", len(res.Errors)).
		Int("skipped", len(res.Skipped)).Msg("manifests loaded")
	// A bad document is logged once, not again on every reload of other
	// documents: only errors the last result did not have.
	logged := make(map[string]bool, len(res.Errors))
	for _, err := range res.Errors {
		if msg := err.Error(); !st.rejected[msg] {
			s.log.Warn().Err(err).Msg("manifest rejected")
		}
		logged[err.Error()] = true
	}
	st.rejected = logged
	for _, err := range res.InvalidCIDRs {
		if msg := err.Error(); !st.invalidCIDRs[msg] {
			s.log.Error().Err(err).Msg("Invalid CIDR ignored")
		}
	}
	st.invalidCIDRs = map[string]bool{}
	for _, err := range res.InvalidCIDRs {
		st.invalidCIDRs[err.Error()] = true
	}
	seen := map[string]bool{}
	for _, err := range res.AnnotationErrors {
		if msg := err.Error(); !st.annotationErrors[msg] {
			s.log.Error().Err(err).Msg("annotation ignored")
		}
		seen[err.Error()] = true
	}
	st.annotationErrors = seen
	if ctx.Err() != nil {
		return 0
	}
	if s.decoded != nil {
		s.decoded(ds)
	}
	emit(res)
	return 0
}

// failed logs a path-level failure once, not on every poll.
func (s *FileSource) failed(st *pollState, err error) {
	if msg := err.Error(); msg != st.lastErr {
		st.lastErr = msg
		s.log.Warn().Err(err).Str("path", s.path).Msg("cannot read manifests; keeping the previous state")
	}
}

// statStamp fingerprints the inputs by name, size, modification time and
// inode, which changes whenever a file is written, replaced, added or
// removed (the inode catches a rename within the mtime's granularity).
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
		fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%d\n", f, info.Size(), info.ModTime().UnixNano(), inode(info))
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
