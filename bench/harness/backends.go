package harness

import (
	"fmt"
	"strconv"

	"github.com/kproxy/kproxy/test/backends"
)

// Backends are the endpoints every service shares: a TCP and a UDP echo
// backend and a TCP sink on each of m loopback addresses, all on the same
// three ports (an
// EndpointSlice names one port for all its endpoints). Each answers with
// its IP as its name, so a client sees which endpoint it reached.
type Backends struct {
	IPs      []string
	TCPPort  int
	UDPPort  int
	SinkPort int // bulk: reads and discards
	// HTTPPort is the close mode's HTTP servers' port on every IP, and
	// HTTPServer which server it is, while the ports scenario runs them
	// (startHTTP).
	HTTPPort   int
	HTTPServer string
	tcp        []*backends.TCP
	udp        []*backends.UDP
	sinks      []*backends.Sink
}

// startBackends starts m of each; the port is the one the kernel gives
// the first, tried on the others (a few attempts, in case it is taken).
func startBackends(m int) (*Backends, error) {
	var lastErr error
	for range 5 {
		b, err := tryBackends(m)
		if err == nil {
			return b, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("start %d backends: %w", m, lastErr)
}

func tryBackends(m int) (*Backends, error) {
	b := &Backends{}
	for i := range m {
		ip := hostIP(backendNet, i)
		t, err := backends.StartTCP(ip, ip+":"+strconv.Itoa(b.TCPPort))
		if err != nil {
			b.Close()
			return nil, err
		}
		b.tcp = append(b.tcp, t)
		b.TCPPort = t.Port()
		u, err := backends.StartUDP(ip, ip+":"+strconv.Itoa(b.UDPPort))
		if err != nil {
			b.Close()
			return nil, err
		}
		b.udp = append(b.udp, u)
		b.UDPPort = u.Port()
		s, err := backends.StartSink(ip + ":" + strconv.Itoa(b.SinkPort))
		if err != nil {
			b.Close()
			return nil, err
		}
		b.sinks = append(b.sinks, s)
		b.SinkPort = s.Port()
		b.IPs = append(b.IPs, ip)
	}
	return b, nil
}

// Close stops every backend.
func (b *Backends) Close() {
	for _, t := range b.tcp {
		t.Close()
	}
	for _, u := range b.udp {
		u.Close()
	}
	for _, s := range b.sinks {
		s.Close()
	}
}
