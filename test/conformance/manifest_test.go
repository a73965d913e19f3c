//go:build linux

package conformance

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// manifest is what the runner needs of a case's file: the service ports
// kproxy should open, the cluster IPs its rules should name, and the
// endpoints the backends must serve. kproxy reads the file itself.
type manifest struct {
	docs         []string
	servicePorts int          // TCP and UDP ports of services with a cluster IP
	clusterIPs   []netip.Addr // as kube-proxy reads them (leading zeros are decimal)
	backends     []backend
}

// backend is an endpoint address, port and protocol, to be served by a
// server that answers with its own "ip:port".
type backend struct {
	proto string
	addr  netip.AddrPort
}

type doc struct {
	Kind string `json:"kind"`
	Spec struct {
		ClusterIP string `json:"clusterIP"`
		Ports     []struct {
			Protocol string `json:"protocol"`
		} `json:"ports"`
	} `json:"spec"`
	Ports []struct {
		Port     int    `json:"port"`
		Protocol string `json:"protocol"`
	} `json:"ports"`
	Endpoints []struct {
		Addresses []string `json:"addresses"`
	} `json:"endpoints"`
}

func readManifest(name string) (*manifest, error) {
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return nil, err
	}
	m := &manifest{}
	seen := map[backend]bool{}
	for _, d := range strings.Split("\n"+string(raw), "\n---\n") {
		var o doc
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if o.Kind == "" {
			continue
		}
		m.docs = append(m.docs, d)
		switch o.Kind {
		case "Service":
			if o.Spec.ClusterIP == "" || o.Spec.ClusterIP == "None" {
				continue
			}
			ip, err := parseSloppy(o.Spec.ClusterIP)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			m.clusterIPs = append(m.clusterIPs, ip)
			for _, p := range o.Spec.Ports {
				if p.Protocol == "" || p.Protocol == "TCP" || p.Protocol == "UDP" {
					m.servicePorts++
				}
			}
		case "EndpointSlice":
			for _, ep := range o.Endpoints {
				for _, a := range ep.Addresses {
					ip, err := parseSloppy(a)
					if err != nil {
						return nil, fmt.Errorf("%s: %w", name, err)
					}
					for _, p := range o.Ports {
						proto := strings.ToLower(p.Protocol)
						if proto == "" {
							proto = "tcp"
						}
						if proto == "sctp" {
							continue
						}
						b := backend{proto, netip.AddrPortFrom(ip, uint16(p.Port))}
						if !seen[b] {
							seen[b] = true
							m.backends = append(m.backends, b)
						}
					}
				}
			}
		}
	}
	return m, nil
}

// text is the manifest as kproxy reads it, without its EndpointSlices
// when noSlices.
func (m *manifest) text(noSlices bool) string {
	var keep []string
	for _, d := range m.docs {
		if noSlices && strings.Contains(d, "kind: EndpointSlice") {
			continue
		}
		keep = append(keep, strings.TrimSpace(d))
	}
	return strings.Join(keep, "\n---\n") + "\n"
}

// parseSloppy parses an IP address as kube-proxy does: an IPv4 octet
// with leading zeros is decimal.
func parseSloppy(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, ":") {
		return netip.ParseAddr(s)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, fmt.Errorf("IP address %q", s)
	}
	var b [4]byte
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("IP address %q: %w", s, err)
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), nil
}
