package messages

import (
	"slices"
	"testing"
)

func TestServicePortKey(t *testing.T) {
	k := &ServicePortKey{Namespace: "default", Name: "web", PortName: "http", Protocol: Protocol_TCP}
	if got := k.ID(); got != "default/web:http/TCP" {
		t.Errorf("ID() = %q", got)
	}
	if got := k.Service(); got != "default/web" {
		t.Errorf("Service() = %q", got)
	}
	var nilKey *ServicePortKey
	if got := nilKey.ID(); got != "<nil>" {
		t.Errorf("nil ID() = %q", got)
	}
}

func TestIPSetAll(t *testing.T) {
	for _, tc := range []struct {
		set  *IPSet
		want []string
	}{
		{nil, nil},
		{&IPSet{}, nil},
		{&IPSet{V4: []string{"192.0.2.1", "192.0.2.2"}}, []string{"192.0.2.1", "192.0.2.2"}},
		{&IPSet{V6: []string{"2001:db8::1"}}, []string{"2001:db8::1"}},
		{&IPSet{V4: []string{"192.0.2.1"}, V6: []string{"2001:db8::1"}}, []string{"192.0.2.1", "2001:db8::1"}},
	} {
		got := tc.set.All()
		if !slices.Equal(got, tc.want) || tc.set.Len() != len(tc.want) {
			t.Errorf("%v: All() = %q, Len() = %d; want %q", tc.set, got, tc.set.Len(), tc.want)
		}
	}
	// The result is a new slice: All never writes into the set's spare capacity.
	set := &IPSet{V4: append(make([]string, 0, 4), "192.0.2.1"), V6: []string{"2001:db8::1"}}
	set.All()
	if spare := set.V4[:2][1]; spare != "" {
		t.Errorf("All() wrote into the set's storage: %q", spare)
	}
}

func TestEndpointAddress(t *testing.T) {
	for _, tc := range []struct {
		ep   *Endpoint
		want string
	}{
		{&Endpoint{Ips: []string{"192.0.2.1", "2001:db8::1"}, Port: 8080}, "192.0.2.1:8080"},
		{&Endpoint{Ips: []string{"2001:db8::1"}, Port: 53}, "[2001:db8::1]:53"},
		{&Endpoint{Port: 80}, ""},
		{nil, ""},
	} {
		if got := tc.ep.Address(); got != tc.want {
			t.Errorf("%v: Address() = %q, want %q", tc.ep, got, tc.want)
		}
	}
}
