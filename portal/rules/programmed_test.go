package rules

import (
	"errors"
	"testing"
)

func TestProgrammedRefusesPlansUntilReset(t *testing.T) {
	p := NewProgrammed()
	r := rule("ns/a:http/TCP", "tcp", "198.18.0.1", 80, 30001)
	if _, add, err := p.Plan([]Rule{r}, nil); err != nil || len(add) != 1 {
		t.Fatalf("Plan = %v, %v", add, err)
	}
	p.Invalidate()
	if p.Known() {
		t.Fatal("Known after Invalidate")
	}
	if _, _, err := p.Plan([]Rule{r}, nil); !errors.Is(err, ErrSyncNeeded) {
		t.Fatalf("Plan after Invalidate = %v, want ErrSyncNeeded", err)
	}
	p.Reset(Set{r.Key(): r})
	if !p.Known() {
		t.Fatal("not Known after Reset")
	}
	if del, add, err := p.Plan([]Rule{r}, nil); err != nil || len(del)+len(add) != 0 {
		t.Fatalf("Plan of the programmed rule = %v, %v, %v; want nothing to do", del, add, err)
	}
}
