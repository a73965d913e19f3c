package rules

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrInjectedFault is the error of a transaction failed by fault injection.
var ErrInjectedFault = errors.New("injected kernel rules fault")

// Faulty wraps an Interface so fault injection can make its transactions
// and presence checks fail for a while, as a broken nft binary, a full
// kernel or a lost lock would. Cleanup is never failed.
type Faulty struct {
	Interface
	until atomic.Int64 // Unix nanoseconds; failing before then
	next  atomic.Int64 // transactions (Sync, Apply) still to fail
}

// NewFaulty wraps r.
func NewFaulty(r Interface) *Faulty { return &Faulty{Interface: r} }

// FailNext makes the next n transactions (Sync or Apply) fail.
func (f *Faulty) FailNext(n int) { f.next.Store(int64(n)) }

// FailFor makes calls fail for d from now.
func (f *Faulty) FailFor(d time.Duration) { f.until.Store(time.Now().Add(d).UnixNano()) }

func (f *Faulty) fault(op string) error {
	if until := f.until.Load(); time.Now().UnixNano() < until {
		return fmt.Errorf("%s: %w (until %s)", op, ErrInjectedFault, time.Unix(0, until).Format(time.RFC3339Nano))
	}
	return nil
}

// transaction fails a transaction that FailNext counts, or that FailFor
// covers.
func (f *Faulty) transaction(op string) error {
	for {
		n := f.next.Load()
		if n <= 0 {
			return f.fault(op)
		}
		if f.next.CompareAndSwap(n, n-1) {
			return fmt.Errorf("%s: %w (%d more to fail)", op, ErrInjectedFault, n-1)
		}
	}
}

// Sync implements Interface.
func (f *Faulty) Sync(ctx context.Context, want Set) error {
	if err := f.transaction("sync"); err != nil {
		return err
	}
	return f.Interface.Sync(ctx, want)
}

// Apply implements Interface.
func (f *Faulty) Apply(ctx context.Context, cur *Programmed, del, add []Rule) error {
	if err := f.transaction("apply"); err != nil {
		return err
	}
	return f.Interface.Apply(ctx, cur, del, add)
}

// Present implements Interface.
func (f *Faulty) Present(ctx context.Context, cur Set) (bool, error) {
	if err := f.fault("check"); err != nil {
		return false, err
	}
	return f.Interface.Present(ctx, cur)
}
