package rules

import "errors"

// ErrSyncNeeded is Apply's answer after a change failed half-way: the
// kernel may hold part of it, so only a Sync restores a known state.
var ErrSyncNeeded = errors.New("an earlier change failed half-way: Sync needed")

// Programmed is what a mode without one transaction per change has
// programmed (iptables: a restore per family; netsh: a command per
// address), and whether a failed change may have left part of itself
// behind, in which case the Set is not what the kernel holds.
type Programmed struct {
	Set     Set
	unknown bool
}

// NewProgrammed returns an empty, known state.
func NewProgrammed() Programmed { return Programmed{Set: Set{}} }

// Plan is Set.Plan, refused with ErrSyncNeeded while the state is unknown.
func (p *Programmed) Plan(upserts, removals []Rule) (del, add []Rule, err error) {
	if p.unknown {
		return nil, nil, ErrSyncNeeded
	}
	return p.Set.Plan(upserts, removals)
}

// Invalidate records that the kernel may differ from Set (a change failed,
// or one is under way) until the next Reset.
func (p *Programmed) Invalidate() { p.unknown = true }

// Reset records that the kernel holds exactly s (after Sync or Cleanup).
func (p *Programmed) Reset(s Set) { p.Set, p.unknown = s, false }

// Known reports whether Set is what the kernel holds.
func (p *Programmed) Known() bool { return !p.unknown }
