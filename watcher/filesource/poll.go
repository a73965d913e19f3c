package filesource

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kproxy/kproxy/watcher"

	"github.com/rs/zerolog"
)

// DefaultPollInterval is used when NewFileSource gets a non-positive interval.
const DefaultPollInterval = time.Second

// FileSource is the incremental source of a manifest file or directory,
// the file counterpart of kubesource.Source: it is a View (its Store), and after
// every reload it notifies only the services whose ports changed, so the
// Watcher's Tracker handles both sources the same way.
//
// It watches the inputs' directory (notify) and also polls, since file
// watches miss changes on some file systems while a periodic stat of a
// handful of files costs nothing. Each file is followed on its own: a
// changed stat (size, mtime, inode) triggers a read of that file once no
// writer has it open (readQuiet) or, where the kernel cannot tell, once it
// has settled, however busy the other files are. Only a file whose content
// hash changed is decoded again; the others' decoded documents are kept
// and joined with it, and then only services that really changed are
// notified, so a touch or an identical rewrite changes nothing downstream.
type FileSource struct {
	*watcher.Store
	path     string
	opts     watcher.Options
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

	// decodedFile, when set, is called with the name of every file
	// decoded (from decoding goroutines). Tests count decodes with it.
	decodedFile func(name string)

	// writerHold is writerHoldLimit; tests shorten it.
	writerHold time.Duration
}

// NewFileSource prepares a source for path (a file or a directory, as for
// LoadPath) polled every interval.
func NewFileSource(path string, opts watcher.Options, interval time.Duration, log zerolog.Logger) *FileSource {
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	if opts.TopologyLog == nil {
		opts.TopologyLog = &log
	}
	return &FileSource{Store: watcher.NewStore(), path: path, opts: opts, interval: interval, log: log, writerHold: writerHoldLimit}
}

// Start reads the path until one read succeeds, then returns with the
// Store holding it and polls for changes in the background until ctx ends.
// Like kubesource.Source.Start it returns once the source is complete: nothing
// should be programmed before. notify gets every service whose ports
// changed (from Start's goroutine for the first read, from the poller's
// afterwards) and must only hand the event on.
func (s *FileSource) Start(ctx context.Context, notify func(watcher.Event)) error {
	ctx, s.stop = context.WithCancel(ctx)
	s.done = make(chan struct{})
	loaded := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(s.done)
		s.run(ctx, func(r *Result) {
			for _, svc := range s.Replace(r.ServicePorts, r.Retain, r.RetainMissing) {
				notify(watcher.Event{Kind: watcher.KindFile, Service: svc})
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
	// files is each input file's state by name; a file that is no longer
	// listed is dropped, and its services with it.
	files   map[string]*fileState
	emitted bool   // a result was emitted: later ones may be partial changes
	lastErr string // last path error logged, to log each failure once
	// rejected holds the document errors of the last result, logged once.
	rejected map[string]bool
	// invalidCIDRs are the ignored source ranges of the last result, logged once.
	invalidCIDRs map[string]bool
	memo         buildMemo // what the last result built, reused for unchanged services
	// annotationErrors are the unapplied annotations of the last result, logged once.
	annotationErrors map[string]bool
}

// fileState is one input file: what was last applied of it, and a change
// seen but not applied yet. Each file waits only for its own writer, so a
// file that keeps changing does not hold back the others.
type fileState struct {
	stamp   string            // stat fingerprint of the content applied; "" until one is
	hash    [sha256.Size]byte // of the content applied
	part    decoded           // its documents, decoded, numbered from 1
	applied bool              // hash and part hold a read of it
	// A change seen but not read yet: its stamp and when it was first
	// seen. It is read once it has not changed for fileSettle (or, with
	// leases, once no writer has it open).
	pending      string
	pendingSince time.Time
	heldLogged   bool // the wait for pending's writer was logged
	lastErr      string
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

// poll performs one check, reading and decoding only the files whose
// stat changed. It returns how long to wait before a change seen now has
// settled, or 0.
func (s *FileSource) poll(ctx context.Context, st *pollState, emit func(*Result)) time.Duration {
	if s.polled != nil {
		defer s.polled()
	}
	names, err := inputFiles(s.path)
	if err != nil {
		for _, f := range st.files {
			f.stamp = "" // whatever reappears is read, even with an old stamp
		}
		s.failed(st, err)
		return 0
	}
	st.lastErr = ""
	if st.files == nil {
		st.files = make(map[string]*fileState)
	}
	listed := make(map[string]bool, len(names))
	changed := false // the file set or some file's content
	var wait time.Duration
	var fresh []input // read and changed: to decode
	now := time.Now()
	for _, name := range names {
		f := st.files[name]
		if f == nil {
			f = &fileState{}
			st.files[name] = f
		}
		stamp, err := fileStamp(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since listed: dropped below
		}
		listed[name] = true
		if err != nil {
			s.fileFailed(f, name, err)
			continue
		}
		if stamp == f.stamp {
			f.pending = ""
			continue
		}
		data, w := s.readFile(f, name, stamp, now)
		if w > 0 {
			if wait == 0 || w < wait {
				wait = w
			}
			continue
		}
		if data == nil {
			continue // failed, logged; retried on the next poll
		}
		f.stamp, f.pending, f.lastErr = stamp, "", ""
		hash := sha256.Sum256(data)
		if f.applied && hash == f.hash {
			s.log.Debug().Str("path", name).Msg("manifest touched but content unchanged")
			continue
		}
		f.hash = hash
		fresh = append(fresh, input{name: name, data: data})
	}
	for name, f := range st.files {
		if !listed[name] {
			delete(st.files, name)
			changed = changed || f.applied
		}
	}
	if len(fresh) > 0 {
		for i, part := range decodeFiles(fresh, s.decodedFile) {
			f := st.files[fresh[i].name]
			f.part, f.applied = part, true
		}
		changed = true
	}
	if !st.emitted {
		// The first result is complete: every listed file read.
		for _, f := range st.files {
			if !f.applied {
				return wait
			}
		}
		changed = true
	}
	if !changed || ctx.Err() != nil {
		return wait
	}
	names = names[:0]
	for name := range st.files {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]decoded, 0, len(names))
	for _, name := range names {
		if f := st.files[name]; f.applied {
			parts = append(parts, f.part)
		}
	}
	ds := setOf(joinDecoded(parts), &st.memo)
	st.memo.turn()
	res := ds.build(s.opts, &st.memo)
	st.emitted = true
	if s.decoded == nil {
		// Built: what is kept of the files read is their documents. (A
		// source building for many nodes keeps the objects, each node's
		// build reading them all.)
		for _, f := range st.files {
			f.part.cool()
		}
	}

	s.log.Info().Str("path", s.path).Int("files", len(parts)).Int("filesRead", len(fresh)).
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
	if s.decoded != nil {
		s.decoded(ds)
	}
	emit(res)
	return wait
}

// readFile reads one changed file once it is complete: no process has it
// open for writing (leases), or, where the kernel cannot tell, it has not
// changed for fileSettle; a writer holding it open is waited for up to
// writerHold. It returns the content, or how long to wait before trying
// again, or neither when the read failed (logged).
func (s *FileSource) readFile(f *fileState, name, stamp string, now time.Time) ([]byte, time.Duration) {
	if stamp != f.pending {
		f.pending, f.pendingSince, f.heldLogged = stamp, now, false
	}
	data, state, err := readQuiet(name)
	if err != nil {
		f.pending = "" // retry on the next poll
		s.fileFailed(f, name, err)
		return nil, 0
	}
	switch stable := now.Sub(f.pendingSince); state {
	case writersOpen:
		// Read once the writer closes (watchCloseWrite wakes the loop),
		// unless it holds the file open, unchanged, for writerHold.
		if stable < s.writerHold {
			if !f.heldLogged {
				f.heldLogged = true
				s.log.Debug().Str("path", name).Msg("manifest open for writing; reading it once the writer closes it")
			}
			return nil, s.writerHold - stable
		}
		s.log.Warn().Str("path", name).Dur("unchangedFor", stable).
			Msg("manifest still open for writing by another process; reading it anyway")
		fallthrough
	case kernelCannotTell:
		// Read only what has stayed the same for fileSettle.
		if wait := fileSettle - stable; wait > 0 {
			return nil, wait
		}
		if data, err = readManifest(name); err != nil {
			f.pending = "" // retry on the next poll
			s.fileFailed(f, name, fmt.Errorf("read manifests: %w", err))
			return nil, 0
		}
	}
	// Changed while being read: wait for it to settle again.
	if after, err := fileStamp(name); err != nil || after != stamp {
		f.pending = ""
		return nil, fileSettle
	}
	return data, 0
}

// fileFailed logs a file's read failure once, not on every poll. The file
// keeps what was applied of it.
func (s *FileSource) fileFailed(f *fileState, name string, err error) {
	if msg := err.Error(); msg != f.lastErr {
		f.lastErr = msg
		s.log.Warn().Err(err).Str("path", name).Msg("cannot read manifest; keeping its previous state")
	}
}

// failed logs a path-level failure once, not on every poll.
func (s *FileSource) failed(st *pollState, err error) {
	if msg := err.Error(); msg != st.lastErr {
		st.lastErr = msg
		s.log.Warn().Err(err).Str("path", s.path).Msg("cannot read manifests; keeping the previous state")
	}
}

// fileStamp fingerprints a file by size, modification time and inode,
// which changes whenever it is written or replaced (the inode catches a
// rename within the mtime's granularity).
func fileStamp(name string) (string, error) {
	info, err := os.Stat(name)
	if err != nil {
		return "", fmt.Errorf("stat manifests: %w", err)
	}
	return fmt.Sprintf("%d\x00%d\x00%d", info.Size(), info.ModTime().UnixNano(), inode(info)), nil
}
