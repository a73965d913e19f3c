package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// service is one Service of the file source: a cluster IP, a TCP and/or
// UDP port, a port to the sinks (Bulk) and one to the HTTP servers
// (HTTP, for close), and the IPs of its endpoints.
type service struct {
	IP                   string
	TCP, UDP, Bulk, HTTP bool
	Endpoints            []string
}

// manifests writes services as Service and EndpointSlice manifests into a
// directory, perFile services to a file, and rewrites one file when a
// service changes (the churn scenario).
type manifests struct {
	dir      string
	perFile  int
	tcpPort  int // the backends' ports: the services' target ports
	udpPort  int
	sinkPort int
	httpPort int
	services []service
}

// writeAll writes every file.
func (m *manifests) writeAll() error {
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	for f := 0; f*m.perFile < len(m.services); f++ {
		if err := m.writeFile(f); err != nil {
			return err
		}
	}
	return nil
}

// set changes service i's endpoints and rewrites its file.
func (m *manifests) set(i int, endpoints []string) error {
	m.services[i].Endpoints = endpoints
	return m.writeFile(i / m.perFile)
}

// writeFile writes file f whole (a temporary file renamed into place, as
// editors do, so the source never reads half of it).
func (m *manifests) writeFile(f int) error {
	var b strings.Builder
	end := min((f+1)*m.perFile, len(m.services))
	for i := f * m.perFile; i < end; i++ {
		m.writeService(&b, i)
	}
	path := filepath.Join(m.dir, fmt.Sprintf("services-%04d.yaml", f))
	tmp := filepath.Join(m.dir, fmt.Sprintf(".services-%04d.tmp", f))
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	return nil
}

func (m *manifests) writeService(b *strings.Builder, i int) {
	s := m.services[i]
	name := serviceName(i)
	fmt.Fprintf(b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: bench}\nspec:\n  clusterIP: %s\n  ports:\n", name, s.IP)
	if s.TCP {
		fmt.Fprintf(b, "  - {name: tcp, protocol: TCP, port: %d, targetPort: %d}\n", tcpServicePort, m.tcpPort)
	}
	if s.UDP {
		fmt.Fprintf(b, "  - {name: udp, protocol: UDP, port: %d, targetPort: %d}\n", udpServicePort, m.udpPort)
	}
	if s.Bulk {
		fmt.Fprintf(b, "  - {name: bulk, protocol: TCP, port: %d, targetPort: %d}\n", bulkServicePort, m.sinkPort)
	}
	if s.HTTP {
		fmt.Fprintf(b, "  - {name: http, protocol: TCP, port: %d, targetPort: %d}\n", closeServicePort, m.httpPort)
	}
	fmt.Fprintf(b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s, namespace: bench, labels: {kubernetes.io/service-name: %s}}\naddressType: IPv4\nports:\n", name, name)
	if s.TCP {
		fmt.Fprintf(b, "- {name: tcp, protocol: TCP, port: %d}\n", m.tcpPort)
	}
	if s.UDP {
		fmt.Fprintf(b, "- {name: udp, protocol: UDP, port: %d}\n", m.udpPort)
	}
	if s.Bulk {
		fmt.Fprintf(b, "- {name: bulk, protocol: TCP, port: %d}\n", m.sinkPort)
	}
	if s.HTTP {
		fmt.Fprintf(b, "- {name: http, protocol: TCP, port: %d}\n", m.httpPort)
	}
	b.WriteString("endpoints:\n")
	for _, ip := range s.Endpoints {
		fmt.Fprintf(b, "- {addresses: [%q], conditions: {ready: true}}\n", ip)
	}
	b.WriteString("---\n")
}
