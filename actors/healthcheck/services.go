package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/portal/datapath"
)

// Services serves a health-check node port for every service that has one
// (externalTrafficPolicy: Local with a healthCheckNodePort), as kube-proxy
// does: 200 while this node has local endpoints for the service and the
// proxy is healthy, else 503, with the local endpoint count. Servers open
// and close as services change; one that cannot open is logged and
// retried by itself with backoff.
//
// The sockets are shared with the next kproxy process (SO_REUSEPORT, as
// the proxy ports are): during a hand-over both serve the port, and once
// this one shuts down (Shutdown) the next one answers every probe.
//
// Service ports report separately (Upsert, Delete); a service's count is
// the largest of its ports'. Safe for concurrent use.
type Services struct {
	hosts []string // addresses to listen on; "" is every address
	proxy *ProxyHealth
	log   zerolog.Logger
	// listen opens a server's socket: datapath.ListenShared.
	listen func(address string) (net.Listener, error)

	mu       sync.Mutex
	closed   bool                              // shut down: nothing opens any more
	ports    map[string]map[string]servicePort // by "namespace/name", then service port ID
	keyOf    map[string]string                 // service port ID -> "namespace/name"
	services map[string]*serviceServer         // by "namespace/name"
}

type servicePort struct {
	port  int
	local int
}

type serviceServer struct {
	namespace, name string
	port            int
	local           int
	servers         []*Server
	err             error       // the last failure to open; retried
	attempts        int         // failed opens in a row
	retry           *time.Timer // the next attempt after a failure
}

// NewServices returns an empty set. hosts are the node addresses to listen
// on (kube-proxy's --nodeport-addresses); none means every address.
// proxy, when set, makes every service unhealthy while the proxy is.
func NewServices(hosts []string, proxy *ProxyHealth, log zerolog.Logger) *Services {
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	listen := func(address string) (net.Listener, error) {
		return datapath.ListenShared(context.Background(), address)
	}
	return &Services{hosts: hosts, proxy: proxy, log: log, listen: listen,
		ports: map[string]map[string]servicePort{}, keyOf: map[string]string{}, services: map[string]*serviceServer{}}
}

// Upsert records a service port's health-check node port (0: none) and
// its count of local ready endpoints. Most service ports have none: they
// cost a map lookup.
func (s *Services) Upsert(id, namespace, name string, port, localEndpoints int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	old, had := s.keyOf[id]
	if !had && port == 0 {
		return
	}
	s.forget(id)
	if port != 0 {
		if s.ports[key] == nil {
			s.ports[key] = map[string]servicePort{}
		}
		s.ports[key][id] = servicePort{port, localEndpoints}
		s.keyOf[id] = key
	}
	if had && old != key {
		s.syncService(old)
	}
	s.syncService(key)
}

// Delete forgets a service port.
func (s *Services) Delete(id string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key, ok := s.keyOf[id]
	if !ok {
		return
	}
	s.forget(id)
	s.syncService(key)
}

// forget drops id's report.
func (s *Services) forget(id string) {
	key, ok := s.keyOf[id]
	if !ok {
		return
	}
	delete(s.keyOf, id)
	delete(s.ports[key], id)
	if len(s.ports[key]) == 0 {
		delete(s.ports, key)
	}
}

// Close closes every server at once, requests in flight too.
func (s *Services) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for key, svc := range s.services {
		svc.close()
		delete(s.services, key)
	}
}

// Shutdown stops accepting on every health-check node port and lets the
// requests in flight finish (until ctx ends): with the next kproxy's
// sockets in the same SO_REUSEPORT group, new probes, and those queued on
// these sockets (net.ipv4.tcp_migrate_req), go to it. The answers go on
// reflecting this process's view until then. Nothing opens afterwards.
func (s *Services) Shutdown(ctx context.Context) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	var servers []*Server
	for _, svc := range s.services {
		svc.stopRetry()
		servers = append(servers, svc.servers...)
		svc.servers = nil
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() { srv.Shutdown(ctx) })
	}
	wg.Wait()
}

// syncService makes a service's server match its ports' reports.
func (s *Services) syncService(key string) {
	port, local := 0, 0
	for _, p := range s.ports[key] {
		port, local = p.port, max(local, p.local)
	}
	svc := s.services[key]
	if svc != nil && svc.port != port {
		svc.close()
		s.log.Info().Str("service", key).Int("port", svc.port).Msg("health-check node port closed")
		delete(s.services, key)
		svc = nil
	}
	if port == 0 {
		return
	}
	if svc == nil {
		namespace, name, _ := strings.Cut(key, "/")
		svc = &serviceServer{namespace: namespace, name: name, port: port}
		s.services[key] = svc
		s.open(svc)
	}
	svc.local = local
}

// open listens on every host at the service's port; on failure nothing
// stays open, and it is tried again by itself with backoff (the port may
// be held by a socket outside kproxy's SO_REUSEPORT group for a while),
// not only at the service's next change.
func (s *Services) open(svc *serviceServer) {
	svc.stopRetry()
	if s.closed {
		return
	}
	err := s.listenAll(svc)
	if err == nil {
		ev := s.log.Info().Str("service", svc.key()).Int("port", svc.port)
		if svc.attempts > 0 {
			ev = ev.Int("failedAttempts", svc.attempts)
		}
		ev.Msg("health-check node port open")
		svc.err, svc.attempts = nil, 0
		return
	}
	svc.err = err
	svc.attempts++
	delay := retryDelay(svc.attempts)
	// The first failure is an error; the retries that follow are not
	// news until one succeeds.
	ev := s.log.Debug()
	if svc.attempts == 1 {
		ev = s.log.Error()
	}
	ev.Err(err).Int("attempt", svc.attempts).Dur("retryIn", delay).Msg("cannot open health-check node port; retrying")
	key, attempt := svc.key(), svc.attempts
	svc.retry = time.AfterFunc(delay, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		// Only the retry this failure scheduled, for the server still wanted.
		if s.services[key] == svc && svc.err != nil && svc.attempts == attempt {
			s.open(svc)
		}
	})
}

// Retry backoff for a health-check node port that cannot be opened: 1 s,
// doubling, at most 5 s (kube-proxy's retry interval for its own health
// server, whose port a predecessor may hold during a rolling update).
const (
	retryFirst = time.Second
	retryMax   = 5 * time.Second
)

func retryDelay(attempt int) time.Duration {
	d := retryFirst
	for i := 1; i < attempt && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// listenAll opens the service's servers on every host, or none.
func (s *Services) listenAll(svc *serviceServer) error {
	// SO_REUSEPORT lets this process bind a port twice; two services
	// must not share one (the API server never allocates it twice, a
	// file source might).
	for _, other := range s.services {
		if other != svc && other.port == svc.port && len(other.servers) > 0 {
			return fmt.Errorf("health-check node port %d of %s: held by %s: %w", svc.port, svc.key(), other.key(), syscall.EADDRINUSE)
		}
	}
	for _, host := range s.hosts {
		addr := net.JoinHostPort(host, strconv.Itoa(svc.port))
		ln, err := s.listen(addr)
		if err != nil {
			svc.close()
			return fmt.Errorf("health-check node port %s of %s: %w", addr, svc.key(), err)
		}
		srv := Serve(ln, s.handler(svc.key()))
		svc.servers = append(svc.servers, srv)
		go func() {
			if err := srv.Err(); err != nil {
				s.log.Error().Err(err).Str("address", addr).Msg("health-check node port server failed")
			}
		}()
	}
	return nil
}

func (svc *serviceServer) key() string { return svc.namespace + "/" + svc.name }

func (svc *serviceServer) stopRetry() {
	if svc.retry != nil {
		svc.retry.Stop()
		svc.retry = nil
	}
}

func (svc *serviceServer) close() {
	svc.stopRetry()
	for _, srv := range svc.servers {
		srv.Close() // not Shutdown: it would wait for handlers, which need the lock held here
	}
	svc.servers = nil
}

func (s *Services) handler(key string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		svc := s.services[key]
		var namespace, name string
		local := 0
		if svc != nil {
			namespace, name, local = svc.namespace, svc.name, svc.local
		}
		s.mu.Unlock()
		if svc == nil {
			http.Error(w, "health check closed", http.StatusServiceUnavailable)
			return
		}
		healthy := s.proxy == nil || s.proxy.IsHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if local > 0 && healthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", namespace, name, local, healthy)
	})
}
