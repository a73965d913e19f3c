package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kproxy/kproxy/portal/datapath"
)

// transparent exports the data path's counts of connections dialled from
// the client's own address, and of those of such services that were not,
// read at scrape time.
type transparent struct{ conns, fallbacks *prometheus.Desc }

func newTransparent() *transparent {
	return &transparent{
		conns: prometheus.NewDesc("kproxy_transparent_connections_total",
			"TCP connections and UDP flows dialled to a node-local endpoint from the client's own address (kproxy.io/preserve-source-ip).", nil, nil),
		fallbacks: prometheus.NewDesc("kproxy_transparent_fallbacks_total",
			"Dials of services that preserve the client's address made from the node's address instead, by reason: remote_endpoint (on another node), dial_failed (the kernel refused the client's address), reply_bypass (the endpoint would answer the client without passing through this node: a host-network endpoint, or a client on its own link).", []string{"reason"}, nil),
	}
}

func (c *transparent) Describe(ch chan<- *prometheus.Desc) { ch <- c.conns; ch <- c.fallbacks }

func (c *transparent) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.CounterValue, float64(datapath.TransparentConnections()))
	remote, failed, bypass := datapath.TransparentFallbacks()
	ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(remote), "remote_endpoint")
	ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(failed), "dial_failed")
	ch <- prometheus.MustNewConstMetric(c.fallbacks, prometheus.CounterValue, float64(bypass), "reply_bypass")
}
