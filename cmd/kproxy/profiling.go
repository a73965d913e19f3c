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

// metricsMux is kube-proxy's metrics server: /metrics, /proxyMode (the
// portal mode, where kube-proxy answers its own mode) and, with profiling
// (kube-proxy's enableProfiling), the profiler's pages; nothing else.
func metricsMux(metrics http.Handler, mode string, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, mode)
	})
	if profiling {
		addProfiling(mux)
	}
	return mux
}

func addProfiling(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
