package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
)

func TestAdminAddressMustBeLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		allow bool
		ok    bool
	}{
		{"127.0.0.1:10260", false, true},
		{"[::1]:10260", false, true},
		{"localhost:10260", false, true},
		{":10260", false, false},
		{"0.0.0.0:10260", false, false},
		{"192.0.2.1:10260", false, false},
		{"[2001:db8::1]:10260", false, false},
		{"0.0.0.0:10260", true, true},
		{"no-port", false, false},
	} {
		err := checkAdminAddress(tc.addr, tc.allow)
		if (err == nil) != tc.ok {
			t.Errorf("checkAdminAddress(%q, %v) = %v, want ok=%v", tc.addr, tc.allow, err, tc.ok)
		}
	}
	o := runOptions{sourceFlags: sourceFlags{source: "kube", kubeAPIQPS: 5, kubeAPIBurst: 10}, portalMode: datapath.ModeBind,
		bindAddress: "127.0.0.1", udpIdleTimeout: time.Second, enableFaultInjection: true, adminAddress: "0.0.0.0:10260"}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("run must refuse a non-loopback admin address, got %v", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestAdminAPIAbsentWithoutFlag(t *testing.T) {
	addr := freeAddr(t)
	in := startKproxyWith(t, service("quiet", "127.0.32.1", 18080, 9, "127.0.32.11"), func(o *runOptions) { o.adminAddress = addr })
	in.waitListening(t, "default/quiet:tcp/TCP", 1)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("admin API is listening without --enable-fault-injection")
	}
}

func TestChaosCommandDrivesAdminAPI(t *testing.T) {
	port := backendsOn(t, "127.0.33.11", "127.0.33.12")
	addr := freeAddr(t)
	in := startKproxyWith(t, service("web", "127.0.33.1", 18080, port, "127.0.33.11", "127.0.33.12"), func(o *runOptions) {
		o.enableFaultInjection, o.adminAddress = true, addr
	})
	in.waitListening(t, "default/web:tcp/TCP", 2)
	chaos := func(args ...string) []byte {
		t.Helper()
		var out bytes.Buffer
		if err := chaosCommand(append([]string{"--admin-address", addr}, args...), &out); err != nil {
			t.Fatalf("kproxy chaos %v: %v: %s", args, err, out.String())
		}
		return out.Bytes()
	}

	chaos("crash", "default/web:tcp/TCP", "portal")
	in.waitFor(t, "portal restarted", func(m map[string]*messages.ServicePortState) bool {
		st := m["default/web:tcp/TCP"]
		return st.GetRestarts() == 1 && len(st.GetListenAddresses()) == 1
	})
	readName(t, "127.0.33.1:18080")

	// The top actors too, without a service port.
	for _, top := range []string{"proxier", "watcher"} {
		chaos("crash", top)
	}
	in.waitFor(t, "the service port carried over the proxier restart", func(m map[string]*messages.ServicePortState) bool {
		st := m["default/web:tcp/TCP"]
		return st.GetRestarts() == 2 && len(st.GetListenAddresses()) == 1
	})
	readName(t, "127.0.33.1:18080")

	// Endpoint fault: dials to .11 fail, so every connection lands on .12.
	chaos("endpoint", fmt.Sprintf("127.0.33.11:%d", port), "fail", "1m")
	for range 10 {
		if got := readName(t, "127.0.33.1:18080"); got != "127.0.33.12" {
			t.Fatalf("connection reached faulty endpoint %s", got)
		}
	}

	out := chaos("storm", "--rate", "50", "--duration", "200ms", "--seed", "7")
	var storm struct{ Crashes []faults.ChaosCrash }
	if err := json.Unmarshal(out, &storm); err != nil || len(storm.Crashes) < 5 {
		t.Fatalf("storm: %v %s", err, out)
	}

	var state struct {
		FaultsInjected int64
		Restarts       int64
		State          struct {
			ServicePorts []struct {
				ListenAddresses []string
				Endpoints       []json.RawMessage
				Restarts        int
			}
		}
	}
	// Every restart counted, and the last Portal listening again (a
	// restart's report clears the listen addresses until it does).
	in.waitFor(t, "storm restarts reported", func(m map[string]*messages.ServicePortState) bool {
		st := m["default/web:tcp/TCP"]
		return st.GetRestarts() == int32(2+len(storm.Crashes)) && len(st.GetListenAddresses()) == 1
	})
	if err := json.Unmarshal(chaos("state"), &state); err != nil {
		t.Fatal(err)
	}
	sp := state.State.ServicePorts
	if len(sp) != 1 || len(sp[0].ListenAddresses) != 1 || len(sp[0].Endpoints) != 2 || sp[0].Restarts != 2+len(storm.Crashes) {
		t.Fatalf("state view: %+v", state)
	}
	if want := int64(4 + len(storm.Crashes)); state.FaultsInjected != want {
		t.Fatalf("faultsInjected %d, want %d", state.FaultsInjected, want)
	}

	// Bad requests get clear errors.
	var out2 bytes.Buffer
	if err := chaosCommand([]string{"--admin-address", addr, "crash", "default/nope:x/TCP"}, &out2); err == nil || !strings.Contains(out2.String(), "unknown service port") {
		t.Fatalf("crash of unknown service port: %v %s", err, out2.String())
	}
}

// The state view carries each failure's code beside its text: a cluster IP
// that is not an address of this host cannot be listened on.
func TestAdminStateCarriesFailureCodes(t *testing.T) {
	addr := freeAddr(t)
	in := startKproxyWith(t, service("remote", "192.0.2.1", 18080, 9, "127.0.34.11"), func(o *runOptions) {
		o.enableFaultInjection, o.adminAddress = true, addr
	})
	in.waitFor(t, "the failure reported", func(m map[string]*messages.ServicePortState) bool {
		return m["default/remote:tcp/TCP"].GetError() != ""
	})
	var out bytes.Buffer
	if err := chaosCommand([]string{"--admin-address", addr, "state"}, &out); err != nil {
		t.Fatalf("kproxy chaos state: %v: %s", err, out.String())
	}
	var state struct {
		State struct {
			ServicePorts []struct {
				Error    string
				Failures []struct{ Code, Message string }
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &state); err != nil {
		t.Fatal(err)
	}
	sp := state.State.ServicePorts
	if len(sp) != 1 || len(sp[0].Failures) != 1 || sp[0].Failures[0].Code != "ADDRESS_NOT_AVAILABLE" ||
		!strings.Contains(sp[0].Error, sp[0].Failures[0].Message) || !strings.Contains(sp[0].Error, "192.0.2.1:18080") {
		t.Fatalf("state view: %s", out.String())
	}
}

// In a rollout the new pod starts beside the old one, whose admin API
// holds the address until it stops: the new process serves meanwhile, and
// takes the address once it is free, with a token of its own.
func TestAdminAPIWaitsForItsAddress(t *testing.T) {
	defer func(d time.Duration) { adminRetryInterval = d }(adminRetryInterval)
	adminRetryInterval = 20 * time.Millisecond
	addr := freeAddr(t)
	held, err := net.Listen("tcp", addr) // the old process's admin API
	if err != nil {
		t.Fatal(err)
	}
	in := startKproxyWith(t, service("wait", "127.0.34.1", 18080, 9, "127.0.34.11"), func(o *runOptions) {
		o.enableFaultInjection, o.adminAddress = true, addr
	})
	in.waitListening(t, "default/wait:tcp/TCP", 1)
	held.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out bytes.Buffer
		err := chaosCommand([]string{"--admin-address", addr, "state"}, &out)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin API not served once its address was free: %v %s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // the retry's own interval: nothing to await
	}
}
