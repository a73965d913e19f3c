package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
)

// checkProfilingAddress accepts only a loopback address: profiles show
// the process's internals and a CPU profile costs CPU while it runs.
func checkProfilingAddress(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--profiling-address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--profiling-address %q is not a loopback address", addr)
}

// profilingHandler serves net/http/pprof's pages on their usual paths
// (go tool pprof http://ADDR/debug/pprof/profile?seconds=20), on a mux of
// its own rather than http.DefaultServeMux.
func profilingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
