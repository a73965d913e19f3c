package healthcheck

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/rs/zerolog"
)

// Services serves a health-check node port for every service that has one
// (externalTrafficPolicy: Local with a healthCheckNodePort), as kube-proxy
// does: 200 while this node has local endpoints for the service and the
// proxy is healthy, else 503, with the local endpoint count. Servers open
// and close as services change; one that cannot open is logged and
// retried at the next change.
//
// Service ports report separately (Upsert, Delete); a service's count is
// the largest of its ports'. Safe for concurrent use.
type Services struct {
	hosts []string // addresses to listen on; "" is every address
	proxy *ProxyHealth
	log   zerolog.Logger

	mu       sync.Mutex
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
	servers         []*http.Server
	err             error // the last failure to open; retried
}

// NewServices returns an empty set. hosts are the node addresses to listen
// on (kube-proxy's --nodeport-addresses); none means every address.
// proxy, when set, makes every service unhealthy while the proxy is.
func NewServices(hosts []string, proxy *ProxyHealth, log zerolog.Logger) *Services {
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	return &Services{hosts: hosts, proxy: proxy, log: log, ports: map[string]map[string]servicePort{}, keyOf: map[string]string{}, services: map[string]*serviceServer{}}
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
	s.retryFailed()
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
	s.retryFailed()
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

// Close closes every server.
func (s *Services) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, svc := range s.services {
		svc.close()
		delete(s.services, key)
	}
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

func (s *Services) retryFailed() {
	for _, svc := range s.services {
		if svc.err != nil {
			s.open(svc)
		}
	}
}

// open listens on every host at the service's port; on failure nothing
// stays open, so a retry starts clean.
func (s *Services) open(svc *serviceServer) {
	svc.err = nil
	for _, host := range s.hosts {
		addr := net.JoinHostPort(host, strconv.Itoa(svc.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			svc.close()
			svc.err = fmt.Errorf("health-check node port %s of %s/%s: %w", addr, svc.namespace, svc.name, err)
			s.log.Error().Err(svc.err).Msg("cannot open health-check node port; retrying at the next change")
			return
		}
		srv := &http.Server{Handler: s.handler(svc.namespace + "/" + svc.name)}
		svc.servers = append(svc.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error().Err(err).Str("address", addr).Msg("health-check node port server failed")
			}
		}()
	}
	s.log.Info().Str("service", svc.namespace+"/"+svc.name).Int("port", svc.port).Msg("health-check node port open")
}

func (svc *serviceServer) close() {
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
