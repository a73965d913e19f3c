package main

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/portal/datapath"
)

// serveRetryInterval is how long an operator endpoint whose address
// cannot be bound waits before trying again (kube-proxy retries too: a
// predecessor may still hold the port during a rolling update).
const serveRetryInterval = 5 * time.Second

// httpShutdownWait bounds how long a stopping operator endpoint lets
// requests in flight finish.
const httpShutdownWait = 5 * time.Second

// serveHTTP serves handler on addr until ctx ends, in the background;
// stopped is closed once it has stopped and finished its requests. A
// failure to listen is logged and retried: the proxy itself keeps
// serving, which matters more than its health or metrics endpoint. The
// socket is shared with the next kproxy process (SO_REUSEPORT, as the
// proxy ports): during a hand-over both answer, and when ctx ends this
// one stops accepting and finishes the requests it has, so a prober of
// /healthz is never refused across a restart.
func serveHTTP(ctx context.Context, what, addr string, handler http.Handler, log zerolog.Logger) (stopped <-chan struct{}) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ln, err := datapath.ListenShared(ctx, addr)
			if err != nil {
				log.Error().Err(err).Str("address", addr).Msgf("cannot serve %s, retrying in %v", what, serveRetryInterval)
				select {
				case <-ctx.Done():
					return
				case <-time.After(serveRetryInterval):
					continue
				}
			}
			log.Info().Str("address", ln.Addr().String()).Msgf("serving %s", what)
			srv := healthcheck.Serve(ln, handler)
			select {
			case <-srv.Done():
				log.Error().Err(srv.Err()).Str("address", addr).Msgf("%s server failed, restarting", what)
				continue
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), httpShutdownWait)
			srv.Shutdown(sctx)
			cancel()
			return
		}
	}()
	return done
}

// nodeAddresses lists this host's addresses within prefixes, as
// "host" strings to listen on; none when prefixes is empty (every address).
func nodeAddresses(prefixes []netip.Prefix) ([]string, error) {
	if len(prefixes) == 0 {
		return nil, nil
	}
	ips, err := localAddresses(prefixes, true)
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out, err
}

// localAddresses lists this host's addresses within prefixes (every one
// when prefixes is empty), loopback and link-local ones only if withLocal.
func localAddresses(prefixes []netip.Prefix, withLocal bool) ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipnet.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if !withLocal && (ip.IsLoopback() || ip.IsLinkLocalUnicast()) {
			continue
		}
		if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			out = append(out, ip)
		}
	}
	return out, nil
}
