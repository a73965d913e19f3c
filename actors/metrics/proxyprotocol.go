package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kproxy/kproxy/portal/datapath"
)

// proxyProtocol exports the data path's count of connections proxied with
// a PROXY protocol header, read at scrape time.
type proxyProtocol struct{ desc *prometheus.Desc }

func newProxyProtocol() *proxyProtocol {
	return &proxyProtocol{desc: prometheus.NewDesc("kproxy_proxy_protocol_connections_total",
		"TCP connections proxied with a PROXY protocol header (kproxy.io/proxy-protocol), by version.", []string{"version"}, nil)}
}

func (c *proxyProtocol) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *proxyProtocol) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(datapath.ProxyHeadersSent(1)), "v1")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(datapath.ProxyHeadersSent(2)), "v2")
}
