package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kproxy/kproxy/portal/datapath"
)

// servicePorts exports the data path's per service port counters at
// scrape time. Series are bounded: at most limit service ports (by ID
// order); how many were left out is exported too.
type servicePorts struct {
	table *datapath.StatsTable
	limit int

	active, conns, dialFailures, bytes, activeFlows, flows, refused, left *prometheus.Desc
	udpDatagrams, udpCalls                                                *prometheus.Desc
}

// ServicePorts registers per service port metrics read from table, for at
// most limit service ports (0: no limit).
func (m *Metrics) ServicePorts(table *datapath.StatsTable, limit int) {
	label := []string{"service_port"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kproxy_service_port_"+name, help, labels, nil)
	}
	m.Registry.MustRegister(&servicePorts{
		table:        table,
		limit:        limit,
		active:       d("connections_active", "TCP connections being proxied.", label...),
		conns:        d("connections_total", "TCP connections accepted.", label...),
		dialFailures: d("dial_failures_total", "Endpoint dials that failed or timed out.", label...),
		bytes:        d("bytes_total", "Bytes proxied over TCP, by direction (to_endpoint, to_client).", "service_port", "direction"),
		activeFlows:  d("udp_flows_active", "UDP flows (client address to endpoint) open.", label...),
		flows:        d("udp_flows_total", "UDP flows opened.", label...),
		refused:      d("refused_total", "New TCP connections (kind tcp) and UDP clients (kind udp) refused at a limit.", "service_port", "kind"),
		udpDatagrams: d("udp_datagrams_total", "UDP datagrams read (op receive) and sent (op send), by direction (to_endpoint, to_client).", "service_port", "direction", "op"),
		udpCalls:     d("udp_syscalls_total", "System calls that read (op receive) or sent (op send) UDP datagrams, by direction; datagrams per call is udp_datagrams_total over this.", "service_port", "direction", "op"),
		left:         prometheus.NewDesc("kproxy_service_port_metrics_omitted", "Service ports left out of the per service port metrics (--metrics-service-ports-limit).", nil, nil),
	})
}

func (c *servicePorts) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.active, c.conns, c.dialFailures, c.bytes, c.activeFlows, c.flows, c.refused, c.udpDatagrams, c.udpCalls, c.left} {
		ch <- d
	}
}

func (c *servicePorts) Collect(ch chan<- prometheus.Metric) {
	left := c.table.Each(c.limit, func(id string, s *datapath.Stats) {
		g := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), id)
		}
		n := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), id)
		}
		g(c.active, s.ActiveConns.Load())
		n(c.conns, s.Conns.Load())
		n(c.dialFailures, s.DialFailures.Load())
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesToEndpoint.Load()), id, "to_endpoint")
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(s.BytesToClient.Load()), id, "to_client")
		g(c.activeFlows, s.ActiveFlows.Load())
		n(c.flows, s.Flows.Load())
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.RefusedConns.Load()), id, "tcp")
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.RefusedFlows.Load()), id, "udp")
		udp := s.UDP()
		if udp == nil {
			udp = &noUDP
		}
		for dir, u := range map[string]*datapath.UDPCounts{"to_endpoint": &udp.ToEndpoint, "to_client": &udp.ToClient} {
			ch <- prometheus.MustNewConstMetric(c.udpDatagrams, prometheus.CounterValue, float64(u.Received.Load()), id, dir, "receive")
			ch <- prometheus.MustNewConstMetric(c.udpDatagrams, prometheus.CounterValue, float64(u.Sent.Load()), id, dir, "send")
			ch <- prometheus.MustNewConstMetric(c.udpCalls, prometheus.CounterValue, float64(u.ReceiveCalls.Load()), id, dir, "receive")
			ch <- prometheus.MustNewConstMetric(c.udpCalls, prometheus.CounterValue, float64(u.SendCalls.Load()), id, dir, "send")
		}
	})
	ch <- prometheus.MustNewConstMetric(c.left, prometheus.GaugeValue, float64(left))
}

// noUDP are the UDP counts of a service port that has had no datagram.
var noUDP datapath.UDPStats
