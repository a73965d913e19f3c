package main

import (
	"math"
	"testing"
	"time"
)

// FuzzAdminRequests: whatever body arrives, parsing never panics and
// accepts only requests within the admin API's bounds.
func FuzzAdminRequests(f *testing.F) {
	for _, seed := range []string{
		`{"servicePort": "default/web:http/TCP", "actor": "balancer"}`,
		`{"rate": 20, "duration": "10s", "seed": 7}`,
		`{"endpoint": "127.0.0.1:80", "mode": "stall", "duration": "30s"}`,
		`{"duration": "5s"}`,
		`{"rate": NaN}`, `{"rate": 1e400}`, `[]`, `{"duration": "-1s"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var chaos chaosRequest
		if parseAdminRequest(body, &chaos) == nil {
			if math.IsNaN(chaos.Rate) || chaos.Rate <= 0 || chaos.Rate > maxChaosRate || chaos.duration <= 0 || chaos.duration > maxChaosDuration {
				t.Fatalf("accepted chaos %+v", chaos)
			}
		}
		var ep endpointFaultRequest
		if parseAdminRequest(body, &ep) == nil && (ep.duration <= 0 || ep.duration > maxFaultDuration || ep.Endpoint == "") {
			t.Fatalf("accepted endpoint fault %+v", ep)
		}
		var rf rulesFaultRequest
		if parseAdminRequest(body, &rf) == nil && !(rf.Count == 0 && rf.duration > 0 && rf.duration <= 10*time.Minute) &&
			!(rf.Duration == "" && rf.Count >= 1 && rf.Count <= maxRulesFaultCount) {
			t.Fatalf("accepted rules fault %+v", rf)
		}
		var lf listenerFaultRequest
		if parseAdminRequest(body, &lf) == nil && (lf.ServicePort == "" || (lf.Fault != "break" && lf.Fault != "emfile") ||
			(lf.Fault == "emfile" && (lf.duration <= 0 || lf.duration > maxFaultDuration))) {
			t.Fatalf("accepted listener fault %+v", lf)
		}
		var af apiserverFaultRequest
		if parseAdminRequest(body, &af) == nil && af.Fault != "break" {
			t.Fatalf("accepted apiserver fault %+v", af)
		}
		var cr crashRequest
		if parseAdminRequest(body, &cr) == nil && ((cr.ServicePort == "" && !topActor(cr.Actor)) || cr.Actor == "") {
			t.Fatalf("accepted crash %+v", cr)
		}
	})
}
