package rulestest

import (
	"context"
	"errors"

	"github.com/kproxy/kproxy/portal/rules"
)

// Programmed drives a kernel mode as the Rules actor does: it keeps the
// record of what is programmed that the mode does not, plans each change
// against it and commits the change when the call succeeds.
type Programmed struct {
	Rules rules.Interface
	*rules.Programmed
}

// Program starts a record of r with nothing programmed.
func Program(r rules.Interface) *Programmed {
	return &Programmed{Rules: r, Programmed: rules.NewProgrammed(rules.Set{})}
}

// Sync programs exactly rs.
func (p *Programmed) Sync(ctx context.Context, rs []rules.Rule) error {
	want, err := rules.Desired(rs)
	if err != nil {
		return err
	}
	err = p.Rules.Sync(ctx, want)
	if err == nil || errors.Is(err, rules.ErrFamilyUnavailable) {
		p.Programmed = rules.NewProgrammed(want)
	}
	return err
}

// Apply removes removals (by key) and puts upserts in.
func (p *Programmed) Apply(ctx context.Context, upserts, removals []rules.Rule) error {
	del, add, err := p.Set.Plan(upserts, removals)
	if err != nil || len(del)+len(add) == 0 {
		return err
	}
	err = p.Rules.Apply(ctx, p.Programmed, del, add)
	if err == nil || errors.Is(err, rules.ErrFamilyUnavailable) {
		p.Programmed.Commit(del, add)
	}
	return err
}

// Present asks whether the kernel still holds what is recorded.
func (p *Programmed) Present(ctx context.Context) (bool, error) { return p.Rules.Present(ctx, p.Set) }

// Cleanup removes everything, and the record with it.
func (p *Programmed) Cleanup(ctx context.Context) error {
	if err := p.Rules.Cleanup(ctx); err != nil {
		return err
	}
	p.Programmed = rules.NewProgrammed(rules.Set{})
	return nil
}
