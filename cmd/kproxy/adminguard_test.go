package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// The admin API cannot be driven or read from a web page the operator
// visits: no token, a foreign Host (DNS rebinding), a foreign Origin, and
// the bodies a page can POST without a CORS preflight (forms,
// text/plain) are all refused; out-of-bound or malformed parameters get
// 400.
func TestAdminAPIRefusesBrowsersAndBadInput(t *testing.T) {
	addr := freeAddr(t)
	tokenFile := t.TempDir() + "/token"
	in := startKproxyWith(t, service("web", "127.0.35.1", 18080, 9, "127.0.35.11"), func(o *runOptions) {
		o.enableFaultInjection, o.adminAddress, o.adminTokenFile = true, addr, tokenFile
	})
	in.waitListening(t, "default/web:tcp/TCP", 1)
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	if fi, _ := os.Stat(tokenFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}

	do := func(method, path, contentType, body string, mutate func(*http.Request)) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if mutate != nil {
			mutate(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const js = "application/json"
	good := `{"endpoint": "127.0.35.11:9", "mode": "fail", "duration": "1s"}`
	for _, c := range []struct {
		name             string
		method, path, ct string
		body             string
		mutate           func(*http.Request)
		want             int
	}{
		{"a valid request", "POST", "/endpoint-fault", js, good, nil, 200},
		{"the state", "GET", "/state", "", "", nil, 200},
		{"no token", "POST", "/endpoint-fault", js, good, func(r *http.Request) { r.Header.Del("Authorization") }, 401},
		{"a wrong token", "GET", "/state", "", "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, 401},
		{"a form POST", "POST", "/endpoint-fault", "application/x-www-form-urlencoded", "endpoint=127.0.35.11:9&mode=fail&duration=1s", nil, 415},
		{"a text/plain POST", "POST", "/endpoint-fault", "text/plain", good, nil, 415},
		{"a foreign Origin", "POST", "/endpoint-fault", js, good, func(r *http.Request) { r.Header.Set("Origin", "http://attacker.example") }, 403},
		{"a foreign Host (DNS rebinding)", "GET", "/state", "", "", func(r *http.Request) { r.Host = "attacker.example:10260" }, 403},
		{"rate NaN", "POST", "/chaos", js, `{"rate": NaN, "duration": "1s"}`, nil, 400},
		{"rate too high", "POST", "/chaos", js, `{"rate": 10000, "duration": "1s"}`, nil, 400},
		{"a storm of a day", "POST", "/chaos", js, `{"rate": 1, "duration": "24h"}`, nil, 400},
		{"an endpoint fault of 10 years", "POST", "/endpoint-fault", js, `{"endpoint": "127.0.35.11:9", "mode": "fail", "duration": "87600h"}`, nil, 400},
		{"an unknown field", "POST", "/rules-fault", js, `{"duration": "1s", "extra": 1}`, nil, 400},
		{"not an endpoint", "POST", "/endpoint-fault", js, `{"endpoint": "web", "mode": "fail", "duration": "1s"}`, nil, 400},
		{"a body too large", "POST", "/crash", js, `{"servicePort": "` + strings.Repeat("x", 100<<10) + `"}`, nil, 400},
	} {
		if got := do(c.method, c.path, c.ct, c.body, c.mutate); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
