package rules

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

// Fake is an Interface whose "kernel" is a Set in memory, as knftables.Fake
// is for nft: for tests of what drives the rules (the Rules actor), where
// the kernel side is not the point. It checks that each Apply is planned
// against what it holds (the caller's record is true), can fail calls on
// demand and pretend its rules were flushed. It is safe for concurrent use.
type Fake struct {
	mu   sync.Mutex
	cond *sync.Cond
	set  Set
	// calls that succeeded
	syncs, applies, cleanups int
	failNext                 []error
	flushed                  bool
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with nothing programmed.
func NewFake() *Fake {
	f := &Fake{set: Set{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// FailNext makes the next len(errs) calls of Sync, Apply or Cleanup fail
// with these errors, in order, changing nothing.
func (f *Fake) FailNext(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = append(f.failNext, errs...)
}

// Flush forgets every rule, as someone flushing the table would: Present
// reports false until the next Sync.
func (f *Fake) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set, f.flushed = Set{}, true
	f.cond.Broadcast()
}

// Sync implements Interface.
func (f *Fake) Sync(_ context.Context, want Set) error {
	return f.change(func() { f.set, f.flushed = maps.Clone(want), false; f.syncs++ })
}

// Apply implements Interface. A cur other than what it holds is the
// caller's record gone wrong: an error (unless flushed meanwhile, which
// the caller learns from Present).
func (f *Fake) Apply(_ context.Context, cur *Programmed, del, add []Rule) error {
	f.mu.Lock()
	drift := !f.flushed && !maps.Equal(cur.Set, f.set)
	f.mu.Unlock()
	if drift {
		return fmt.Errorf("apply planned against %d rules, %d programmed", len(cur.Set), len(f.set))
	}
	return f.change(func() { f.set.Commit(del, add); f.applies++ })
}

// Cleanup implements Interface.
func (f *Fake) Cleanup(context.Context) error {
	return f.change(func() { f.set = Set{}; f.cleanups++ })
}

// Present implements Interface: false after Flush, until the next Sync.
func (f *Fake) Present(context.Context, Set) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.flushed, nil
}

func (f *Fake) change(apply func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failNext) > 0 {
		err := f.failNext[0]
		f.failNext = f.failNext[1:]
		return err
	}
	apply()
	f.cond.Broadcast()
	return nil
}

// Calls counts the Sync, Apply and Cleanup calls that succeeded.
func (f *Fake) Calls() (syncs, applies, cleanups int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs, f.applies, f.cleanups
}

// Rules lists what is programmed, in Sort order.
func (f *Fake) Rules() []Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.set.Sorted()
}

// Wait blocks until ok holds for what is programmed (by key), or fails
// after timeout with what is programmed then. It wakes on every change.
func (f *Fake) Wait(timeout time.Duration, ok func(Set) bool) error {
	timer := time.AfterFunc(timeout, func() { f.mu.Lock(); f.cond.Broadcast(); f.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	f.mu.Lock()
	defer f.mu.Unlock()
	for !ok(f.set) {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for portal rules; programmed: %v", timeout, f.set.Sorted())
		}
		f.cond.Wait()
	}
	return nil
}
