package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// UnredirectedCounter is a kernel portal that counts what reached a proxy
// port without its redirect (the nftables and iptables modes).
type UnredirectedCounter interface {
	UnredirectedPackets(ctx context.Context) (uint64, error)
}

// unredirected exports that count, read from the kernel at scrape time.
type unredirected struct {
	desc *prometheus.Desc
	c    UnredirectedCounter
}

// unredirectedReadTimeout bounds one read of the kernel's counter (an nft
// or iptables-save run) within a scrape.
const unredirectedReadTimeout = 5 * time.Second

// Unredirected exports the count of packets rejected at a proxy port
// because kproxy's rules did not redirect them there: connections from
// another host, a pod or a local process to a proxy port itself.
func (m *Metrics) Unredirected(c UnredirectedCounter) {
	m.Registry.MustRegister(&unredirected{c: c, desc: prometheus.NewDesc("kproxy_proxy_port_unredirected_packets_total",
		"New connections and datagrams that reached a proxy port without kproxy's redirect (from another host, a pod, or a local process dialling the port itself) and were refused, since the kernel rules were last replaced whole.", nil, nil)})
}

func (u *unredirected) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

func (u *unredirected) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), unredirectedReadTimeout)
	defer cancel()
	n, err := u.c.UnredirectedPackets(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(u.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(u.desc, prometheus.CounterValue, float64(n))
}
