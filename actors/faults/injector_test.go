package faults_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

// Prepare puts the kernel rules behind the Faulty the Injector drives, and
// gives the data path the faults it sets.
func TestPrepareWiresTheTreeToTheInjector(t *testing.T) {
	kernel := rules.NewFake()
	cfg := actors.Config{PortalMode: datapath.ModeNftables, Rules: kernel}
	c := faults.Prepare(&cfg)
	if c.Rules == nil || cfg.Rules != rules.Interface(c.Rules) || c.Rules.Interface != kernel {
		t.Fatalf("the tree's rules are %T, want the Faulty in front of the kernel's", cfg.Rules)
	}
	if c.Endpoints == nil || cfg.Faults != c.Endpoints {
		t.Fatal("the data path and the Injector do not share the endpoint faults")
	}
	bind := actors.Config{}
	if c := faults.Prepare(&bind); c.Rules != nil || bind.Rules != nil {
		t.Fatal("bind mode got kernel rules")
	}
}

// Each fault needs what it drives: rules faults a kernel mode, endpoint
// and listener faults a tree prepared for them. What is refused is not
// counted.
func TestFaultsNeedWhatTheyDrive(t *testing.T) {
	tr := startTree(t, actors.Config{}, zerolog.ErrorLevel)
	if err := tr.inj.FailRules(1); err == nil {
		t.Error("a rules fault in bind mode was accepted")
	}
	if err := tr.inj.SetRulesFault(time.Second); err == nil {
		t.Error("a rules fault in bind mode was accepted")
	}
	if err := tr.inj.SetEndpointFault("127.0.0.1:9", datapath.FaultFail, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := tr.inj.SetEndpointFault("127.0.0.1:9", "slow", time.Second); err == nil {
		t.Error("an unknown endpoint fault mode was accepted")
	}
	if err := tr.inj.CrashTop("rules", "test"); err == nil {
		t.Error("a rules crash in bind mode was accepted")
	}
	unprepared := faults.New(tr.p, faults.Config{})
	if err := unprepared.SetEndpointFault("127.0.0.1:9", datapath.FaultFail, time.Second); err == nil {
		t.Error("an endpoint fault without datapath.Faults was accepted")
	}
	if err := unprepared.SetListenerFault("default/x:p/TCP", faults.ListenerFaultEMFILE, time.Second); err == nil {
		t.Error("a listener fault without datapath.Faults was accepted")
	}
	if got := tr.inj.Counts().FaultsInjected; got != 1 {
		t.Errorf("%d faults counted, want the 1 endpoint fault", got)
	}

	kernel := startTree(t, actors.Config{PortalMode: datapath.ModeNftables, Rules: rules.NewFake()}, zerolog.ErrorLevel)
	if err := kernel.inj.FailRules(2); err != nil {
		t.Fatal(err)
	}
	if err := kernel.inj.SetRulesFault(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := kernel.inj.Counts().FaultsInjected; got != 2 {
		t.Errorf("%d faults counted, want 2 rules faults", got)
	}
}
