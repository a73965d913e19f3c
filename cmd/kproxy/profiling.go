package main

import (
	"fmt"
	"net/http"
	"net/http/pprof"
)

// checkProfilingAddress accepts only a loopback address: profiles show
// the process's internals and a CPU profile costs CPU while it runs.
func checkProfilingAddress(addr string) error {
	loopback, err := loopbackAddress("--profiling-address", addr)
	if err != nil || loopback {
		return err
	}
	return fmt.Errorf("--profiling-address %q is not a loopback address", addr)
}

// profilingHandler serves net/http/pprof's pages on their usual paths
// (go tool pprof http://ADDR/debug/pprof/profile?seconds=20), on a mux of
// its own rather than http.DefaultServeMux.
func profilingHandler() http.Handler {
	mux := http.NewServeMux()
	addProfiling(mux)
	return mux
}

// withProfiling serves the profiler's pages beside h (kube-proxy's
// enableProfiling serves them on its metrics server too).
func withProfiling(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	addProfiling(mux)
	return mux
}

func addProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
