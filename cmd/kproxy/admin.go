package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kproxy/kproxy/actors"
)

// DefaultAdminAddress is where the fault-injection admin API listens.
const DefaultAdminAddress = "127.0.0.1:10260"

// checkAdminAddress refuses a non-loopback admin address unless allowed:
// the admin API can crash actors and break endpoints.
func checkAdminAddress(addr string, allowNonLoopback bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--admin-address %q: %w", addr, err)
	}
	if allowNonLoopback {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--admin-address %q is not a loopback address; the fault-injection API would be reachable from the network (pass --admin-allow-non-loopback to insist)", addr)
}

// startAdmin serves the admin API on addr until ctx ends.
func startAdmin(ctx context.Context, addr string, p *actors.Proxy, log zerolog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	srv := &http.Server{Handler: adminHandler(p), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Warn().Str("address", ln.Addr().String()).Msg("fault-injection admin API enabled")
	return ln.Addr(), nil
}

func adminHandler(p *actors.Proxy) http.Handler {
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
			actors.FaultCounts
			State json.RawMessage `json:"state"`
		}{p.Counts(), raw})
	})
	mux.HandleFunc("POST /crash", func(w http.ResponseWriter, r *http.Request) {
		sp, role := r.FormValue("servicePort"), r.FormValue("actor")
		if role == "" {
			role = "portal"
		}
		if err := p.Crash(sp, role, "admin API"); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, actors.ErrUnknownServicePort) {
				status = http.StatusNotFound
			}
			httpError(w, status, err)
			return
		}
		writeJSON(w, map[string]string{"crashed": sp, "actor": role})
	})
	mux.HandleFunc("POST /chaos", func(w http.ResponseWriter, r *http.Request) {
		rate, err1 := strconv.ParseFloat(r.FormValue("rate"), 64)
		d, err2 := time.ParseDuration(r.FormValue("duration"))
		seed, err3 := strconv.ParseUint(defaultString(r.FormValue("seed"), "1"), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("chaos wants rate (per second), duration and seed: %w", err))
			return
		}
		crashes, err := p.Chaos(r.Context(), rate, d, seed)
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, map[string]any{"crashes": crashes})
	})
	mux.HandleFunc("POST /endpoint-fault", func(w http.ResponseWriter, r *http.Request) {
		ep, mode := r.FormValue("endpoint"), r.FormValue("mode")
		d, err := time.ParseDuration(r.FormValue("duration"))
		if err == nil {
			err = p.SetEndpointFault(ep, mode, d)
		}
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, map[string]string{"endpoint": ep, "mode": mode, "duration": d.String()})
	})
	mux.HandleFunc("POST /rules-fault", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.FormValue("duration"))
		if err == nil {
			err = p.SetRulesFault(d)
		}
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, map[string]string{"rules": "fail", "duration": d.String()})
	})
	return mux
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
