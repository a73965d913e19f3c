package actors

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/rules"
)

func TestFailureClassifiesErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, inUse := net.Listen("tcp", taken.Addr().String())
	_, notLocal := net.Listen("tcp", "192.0.2.1:0") // TEST-NET-1: never an address of this host
	for _, tc := range []struct {
		name      string
		err       error
		otherwise messages.FailureCode
		want      messages.FailureCode
	}{
		{"port taken", inUse, messages.FailureCode_FAILURE_CODE_UNKNOWN, messages.FailureCode_ADDRESS_IN_USE},
		{"address not local", notLocal, messages.FailureCode_FAILURE_CODE_UNKNOWN, messages.FailureCode_ADDRESS_NOT_AVAILABLE},
		{"unsupported protocol", fmt.Errorf("open portal: %w", datapath.ErrUnsupportedProtocol), messages.FailureCode_PROXY_PORT_UNAVAILABLE, messages.FailureCode_UNSUPPORTED_PROTOCOL},
		{"range exhausted", fmt.Errorf("allocate: %w", datapath.ErrPortRangeExhausted), messages.FailureCode_FAILURE_CODE_UNKNOWN, messages.FailureCode_PROXY_PORT_UNAVAILABLE},
		{"family unavailable", fmt.Errorf("iptables apply: %w", rules.ErrFamilyUnavailable), messages.FailureCode_KERNEL_RULES, messages.FailureCode_FAMILY_UNAVAILABLE},
		{"unknown kind", errors.New("something else"), messages.FailureCode_FAILURE_CODE_UNKNOWN, messages.FailureCode_FAILURE_CODE_UNKNOWN},
		{"unknown kind, known operation", errors.New("something else"), messages.FailureCode_KERNEL_RULES, messages.FailureCode_KERNEL_RULES},
	} {
		if tc.err == nil {
			t.Fatalf("%s: the setup produced no error", tc.name)
		}
		f := failure(tc.err, tc.otherwise)
		if f.GetCode() != tc.want || f.GetMessage() != tc.err.Error() {
			t.Errorf("%s: failure(%v) = %v, want code %v and the error's text", tc.name, tc.err, f, tc.want)
		}
	}
	if f := failure(nil, messages.FailureCode_KERNEL_RULES); f != nil {
		t.Errorf("failure(nil) = %v, want nil", f)
	}
}

// The state a ServicePort reports carries each failure's code beside the
// text: a protocol the proxy cannot carry (no proxy port, no Portal) and an
// address that is not local (the Portal's listener).
func TestStateCarriesFailureCodes(t *testing.T) {
	p := startProxy(t)
	w := watchState(t, p)
	addrs := tcpBackends(t, 1)
	sctp := svcPort("sctp", messages.Protocol_SCTP, "127.0.24.1", 18080)
	remote := svcPort("remote", messages.Protocol_TCP, "192.0.2.1", 18080)
	p.Submit(snapshot(1, spe(sctp, endpoints(addrs...)), spe(remote, endpoints(addrs...))))
	codes := func(st *messages.ServicePortState) []messages.FailureCode {
		var out []messages.FailureCode
		for _, f := range st.GetFailures() {
			out = append(out, f.GetCode())
		}
		return out
	}
	var states map[string]*messages.ServicePortState
	w.wait(t, "both service ports report a failure", func(m map[string]*messages.ServicePortState) bool {
		states = m
		return m[sctp.GetKey().ID()].GetError() != "" && m[remote.GetKey().ID()].GetError() != ""
	})
	for sp, want := range map[*messages.ServicePort]messages.FailureCode{
		sctp:   messages.FailureCode_UNSUPPORTED_PROTOCOL,
		remote: messages.FailureCode_ADDRESS_NOT_AVAILABLE,
	} {
		st := states[sp.GetKey().ID()]
		if got := codes(st); !slices.Equal(got, []messages.FailureCode{want}) {
			t.Errorf("%s: codes %v, want [%v] (error %q)", sp.GetKey().ID(), got, want, st.GetError())
		}
	}
}
