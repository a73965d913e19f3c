package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/rs/zerolog"
)

// serveRetryInterval is how long an operator endpoint whose address
// cannot be bound waits before trying again (kube-proxy retries too: a
// predecessor may still hold the port during a rolling update).
const serveRetryInterval = 5 * time.Second

// serveHTTP serves handler on addr until ctx ends, in the background.
// A failure to listen is logged and retried: the proxy itself keeps
// serving, which matters more than its health or metrics endpoint.
func serveHTTP(ctx context.Context, what, addr string, handler http.Handler, log zerolog.Logger) {
	go func() {
		for {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				log.Error().Err(err).Str("address", addr).Msgf("cannot serve %s, retrying in %v", what, serveRetryInterval)
				select {
				case <-ctx.Done():
					return
				case <-time.After(serveRetryInterval):
					continue
				}
			}
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			log.Info().Str("address", ln.Addr().String()).Msgf("serving %s", what)
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Str("address", addr).Msgf("%s server failed, restarting", what)
				continue
			}
			return
		}
	}()
}

// nodeAddresses lists this host's addresses within prefixes, as
// "host" strings to listen on; none when prefixes is empty (every address).
func nodeAddresses(prefixes []netip.Prefix) ([]string, error) {
	if len(prefixes) == 0 {
		return nil, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []string
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
		for _, p := range prefixes {
			if p.Contains(ip) {
				out = append(out, ip.String())
				break
			}
		}
	}
	return out, nil
}
