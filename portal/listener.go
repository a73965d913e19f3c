package portal

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Listener is one open socket and the goroutine serving it.
type Listener struct {
	Spec   ListenSpec
	sock   interface{ Close() error }
	udp    *UDPProxy
	closed atomic.Bool
}

// ListenerOptions are what every listener of a service port shares.
type ListenerOptions struct {
	Picker         Picker
	Conns          *ConnTracker
	UDPIdleTimeout time.Duration
	Log            zerolog.Logger
	// OnFailure is called from the serving goroutine when the socket fails
	// (not when it is closed by Close), or when that goroutine panics.
	OnFailure func(spec ListenSpec, err error)
}

// Open binds the socket of spec and starts serving it.
func Open(spec ListenSpec, o ListenerOptions) (*Listener, error) {
	l := &Listener{Spec: spec}
	log := o.Log.With().Str("listen", spec.Address).Logger()
	var serve func() error
	switch spec.Network {
	case "tcp":
		ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", spec.Address)
		if err != nil {
			return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
		}
		tcp := &TCPProxy{Picker: o.Picker, External: spec.External, Conns: o.Conns, Log: log}
		l.sock = ln
		serve = func() error { return tcp.Serve(ln.(*net.TCPListener)) }
	case "udp":
		addr, err := net.ResolveUDPAddr("udp", spec.Address)
		if err != nil {
			return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
		}
		conn, err := net.ListenUDP("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("open portal %s/%s: %w", spec.Network, spec.Address, err)
		}
		l.udp = &UDPProxy{Picker: o.Picker, External: spec.External, IdleTimeout: o.UDPIdleTimeout, Conns: o.Conns, Log: log}
		l.sock = conn
		serve = func() error { return l.udp.Serve(conn) }
	default:
		return nil, fmt.Errorf("open portal %s: %w", spec.Address, ErrUnsupportedProtocol)
	}
	go func() {
		defer func() {
			if r := recover(); r != nil && o.OnFailure != nil {
				o.OnFailure(spec, fmt.Errorf("serving goroutine panicked: %v", r))
			}
		}()
		err := serve()
		if !l.closed.Load() && o.OnFailure != nil {
			o.OnFailure(spec, err)
		}
	}()
	return l, nil
}

// Close closes the socket. Established TCP connections and UDP flows are
// not closed: they belong to their own goroutines.
func (l *Listener) Close() {
	if l.closed.Swap(true) {
		return
	}
	l.sock.Close()
}

// RetainEndpoints ends UDP flows to endpoints no longer in the set.
func (l *Listener) RetainEndpoints(keep func(string) bool) {
	if l.udp != nil {
		l.udp.RetainEndpoints(keep)
	}
}

// CloseFlows ends every UDP flow of this listener.
func (l *Listener) CloseFlows() {
	if l.udp != nil {
		l.udp.CloseFlows()
	}
}
