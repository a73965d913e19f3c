package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/watcher/kubesource"
)

// DefaultAdminAddress is where the fault-injection admin API listens.
const DefaultAdminAddress = "127.0.0.1:10260"

// checkAdminAddress refuses a non-loopback admin address unless allowed:
// the admin API can crash actors and break endpoints.
func checkAdminAddress(addr string, allowNonLoopback bool) error {
	loopback, err := loopbackAddress("--admin-address", addr)
	if err != nil || loopback || allowNonLoopback {
		return err
	}
	return fmt.Errorf("--admin-address %q is not a loopback address; the fault-injection API would be reachable from the network (pass --admin-allow-non-loopback to insist)", addr)
}

// checkUIAddress refuses a non-loopback live view address unless allowed:
// the page shows every service port and endpoint.
func checkUIAddress(addr string, allowNonLoopback bool) error {
	loopback, err := loopbackAddress("--ui-address", addr)
	if err != nil || loopback || allowNonLoopback {
		return err
	}
	return fmt.Errorf("--ui-address %q is not a loopback address; the live view would show every service port and endpoint to the network (pass --ui-allow-non-loopback to insist)", addr)
}

// startAdmin serves the admin API on addr until ctx ends. Every request
// needs the token (written to tokenFile for kproxy chaos), a Host naming
// the admin address, no foreign Origin, and POSTs a JSON body: a web page
// the operator visits can neither read the state (DNS rebinding) nor
// drive faults (form or text/plain POSTs, which need no CORS preflight).
//
// An address in use is waited for, not an error: in a rollout the new
// pod starts beside the old one on the node's network, and the old
// process keeps its admin API until it stops, which waits for the new one
// to be ready. Unlike the health and metrics ports the admin port is not
// shared: each process has its own token, and a request answered by the
// other process would be refused. The token is written once the port is
// this process's, so kproxy chaos reads the token of the process it
// reaches.
func startAdmin(ctx context.Context, addr, tokenFile string, p *actors.Proxy, inj *faults.Injector, api *kubesource.APIConns, log zerolog.Logger) error {
	serve := func(ln net.Listener) error {
		token, err := writeAdminToken(tokenFile)
		if err != nil {
			ln.Close()
			return err
		}
		srv := &http.Server{Handler: guardAdmin(adminHandler(p, inj, api, log), token, adminHosts(addr, ln.Addr())), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		go func() {
			<-ctx.Done()
			srv.Close()
		}()
		log.Warn().Str("address", ln.Addr().String()).Str("tokenFile", tokenFile).Msg("fault-injection admin API enabled")
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return serve(ln)
	}
	if !addrInUse(err) {
		return fmt.Errorf("admin API: %w", err)
	}
	log.Warn().Err(err).Str("address", addr).Msgf("admin API address in use (the kproxy serving beside this one in a hand-over?): trying again every %v", adminRetryInterval)
	go func() {
		tick := time.NewTicker(adminRetryInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ln, err := net.Listen("tcp", addr)
			if addrInUse(err) {
				continue
			}
			if err == nil {
				err = serve(ln)
			}
			if err != nil {
				log.Error().Err(err).Str("address", addr).Msg("admin API not served")
			}
			return
		}
	}()
	return nil
}

// adminRetryInterval is how often an admin API address in use is tried
// again (serveHTTP's interval; tests shorten it).
var adminRetryInterval = serveRetryInterval

// adminHosts are the Host headers the admin API answers: the address as
// configured, and the loopback names of the port it listens on.
func adminHosts(configured string, bound net.Addr) map[string]bool {
	hosts := map[string]bool{strings.ToLower(configured): true, strings.ToLower(bound.String()): true}
	if _, port, err := net.SplitHostPort(bound.String()); err == nil {
		for _, h := range []string{"localhost", "127.0.0.1", "[::1]"} {
			hosts[h+":"+port] = true
		}
	}
	return hosts
}

// maxAdminBody bounds a request body.
const maxAdminBody = 64 << 10

func guardAdmin(next http.Handler, token string, hosts map[string]bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts[strings.ToLower(r.Host)] {
			httpError(w, http.StatusForbidden, fmt.Errorf("host %q is not this admin API (DNS rebinding?)", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || !hosts[strings.ToLower(u.Host)] {
				httpError(w, http.StatusForbidden, fmt.Errorf("origin %q may not use the admin API", origin))
				return
			}
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			httpError(w, http.StatusUnauthorized, errors.New("missing or wrong admin token (Authorization: Bearer, from the token file)"))
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				httpError(w, http.StatusUnsupportedMediaType, errors.New("POST bodies must be application/json"))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
		}
		next.ServeHTTP(w, r)
	})
}

// api is nil unless the source is the API server.
func adminHandler(p *actors.Proxy, inj *faults.Injector, api *kubesource.APIConns, log zerolog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		snap, err := p.State(5 * time.Second)
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, err)
			return
		}
		raw, err := protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(snap)
		if err != nil {
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, struct {
			faults.FaultCounts
			State json.RawMessage `json:"state"`
		}{inj.Counts(), raw})
	})
	mux.HandleFunc("POST /crash", func(w http.ResponseWriter, r *http.Request) {
		var req crashRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		crash := func() error { return inj.Crash(req.ServicePort, req.Actor, "admin API") }
		if topActor(req.Actor) {
			crash = func() error { return inj.CrashTop(req.Actor, "admin API") }
		}
		if err := crash(); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, actors.ErrUnknownServicePort) {
				status = http.StatusNotFound
			}
			httpError(w, status, err)
			return
		}
		writeJSON(w, map[string]string{"crashed": req.ServicePort, "actor": req.Actor})
	})
	mux.HandleFunc("POST /chaos", func(w http.ResponseWriter, r *http.Request) {
		var req chaosRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		kinds := req.Kinds
		if len(kinds) == 0 {
			kinds = []string{"portal"}
		}
		crashes, err := inj.Storm(r.Context(), req.Rate, req.duration, req.Seed, kinds)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, faults.ErrChaosRunning) {
				status = http.StatusConflict
			}
			httpError(w, status, err)
			return
		}
		writeJSON(w, map[string]any{"crashes": crashes})
	})
	mux.HandleFunc("POST /endpoint-fault", func(w http.ResponseWriter, r *http.Request) {
		var req endpointFaultRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		if err := inj.SetEndpointFault(req.Endpoint, req.Mode, req.duration); err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, map[string]string{"endpoint": req.Endpoint, "mode": req.Mode, "duration": req.duration.String()})
	})
	mux.HandleFunc("POST /listener-fault", func(w http.ResponseWriter, r *http.Request) {
		var req listenerFaultRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		if err := inj.SetListenerFault(req.ServicePort, req.Fault, req.duration); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, actors.ErrUnknownServicePort) {
				status = http.StatusNotFound
			}
			httpError(w, status, err)
			return
		}
		writeJSON(w, map[string]string{"servicePort": req.ServicePort, "fault": req.Fault, "duration": req.duration.String()})
	})
	mux.HandleFunc("POST /apiserver-fault", func(w http.ResponseWriter, r *http.Request) {
		var req apiserverFaultRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		if api == nil {
			httpError(w, http.StatusBadRequest, errors.New("the source is not the API server (--source kube)"))
			return
		}
		n := api.Break()
		log.Warn().Int("connections", n).Msg("fault injected: connections to the API server broken")
		writeJSON(w, map[string]any{"apiserver": "break", "connectionsClosed": n})
	})
	mux.HandleFunc("POST /rules-fault", func(w http.ResponseWriter, r *http.Request) {
		var req rulesFaultRequest
		if !decodeRequest(w, r, &req) {
			return
		}
		if req.Count > 0 {
			if err := inj.FailRules(req.Count); err != nil {
				httpError(w, http.StatusBadRequest, err)
				return
			}
			writeJSON(w, map[string]any{"rules": "fail", "count": req.Count})
			return
		}
		if err := inj.SetRulesFault(req.duration); err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, map[string]string{"rules": "fail", "duration": req.duration.String()})
	})
	return mux
}

// decodeRequest reads a JSON body into req and checks it, answering 400
// itself when it is not acceptable.
func decodeRequest(w http.ResponseWriter, r *http.Request, req adminRequest) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = parseAdminRequest(body, req)
	}
	if err != nil {
		httpError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
