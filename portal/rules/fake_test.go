package rules

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	a := Rule{ServicePort: "ns/a:http/TCP", Protocol: "tcp", IP: netip.MustParseAddr("198.18.0.1"), Port: 80, ProxyPort: 30001}
	b := Rule{ServicePort: "ns/b:http/TCP", Protocol: "tcp", Port: 30080, NodePort: true, Reject: true}
	one := Set{a.Key(): a}
	if err := f.Sync(ctx, one); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(ctx, NewProgrammed(one), nil, []Rule{b}); err != nil {
		t.Fatal(err)
	}
	if got := f.Rules(); len(got) != 2 || got[0] != a || got[1].Key() != b.Key() {
		t.Fatalf("Rules() = %v", got)
	}
	// A change planned against another record than what it holds is the
	// caller's bug.
	if err := f.Apply(ctx, NewProgrammed(one), []Rule{a}, nil); err == nil {
		t.Error("Apply planned against a stale record succeeded")
	}

	two := Set{a.Key(): a, b.Key(): b}
	boom := errors.New("boom")
	f.FailNext(boom)
	if err := f.Apply(ctx, NewProgrammed(two), []Rule{a}, nil); !errors.Is(err, boom) {
		t.Fatalf("Apply after FailNext = %v, want boom", err)
	}
	if len(f.Rules()) != 2 {
		t.Fatal("a failed Apply changed the rules")
	}

	f.Flush()
	if ok, _ := f.Present(ctx, one); ok {
		t.Fatal("Present after Flush")
	}
	done := make(chan error, 1)
	go func() { done <- f.Wait(5*time.Second, func(s Set) bool { return len(s) == 1 }) }()
	if err := f.Sync(ctx, one); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.Present(ctx, one); !ok {
		t.Fatal("not Present after Sync")
	}
	if err := f.Wait(10*time.Millisecond, func(s Set) bool { return len(s) == 5 }); err == nil {
		t.Fatal("Wait for an impossible state returned nil")
	}
	if syncs, applies, _ := f.Calls(); syncs != 2 || applies != 1 {
		t.Fatalf("Syncs=%d Applies=%d, want 2 and 1", syncs, applies)
	}
}

func TestFaultyFailsTheNextTransactions(t *testing.T) {
	f := NewFaulty(NewFake())
	f.FailNext(2)
	ctx := context.Background()
	for i, want := range []bool{true, true, false} {
		err := f.Apply(ctx, NewProgrammed(Set{}), nil, nil)
		if got := errors.Is(err, ErrInjectedFault); got != want {
			t.Fatalf("transaction %d: %v, want injected fault %v", i, err, want)
		}
	}
	if ok, err := f.Present(ctx, Set{}); err != nil || !ok {
		t.Fatalf("Present after the counted faults: %v %v", ok, err)
	}
}
