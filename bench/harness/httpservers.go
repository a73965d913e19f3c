package harness

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/kproxy/kproxy/test/backends"
)

// The close mode's endpoints are HTTP/1.1 servers that answer 200 and
// close after each response, the shape of users' `Connection: close`
// traffic: nginx where it is installed, a real server's accept and close
// path; Go's net/http in this process otherwise. Only the ports scenario
// runs them; the others load the echo backends.
const (
	httpServerNginx = "nginx"
	httpServerGo    = "Go net/http"
)

// httpReadyTimeout bounds nginx's start on its ports.
const httpReadyTimeout = 10 * time.Second

// startHTTP starts an HTTP server on every backend IP at one port (nginx
// when nginx names its binary) and sets HTTPPort and HTTPServer; stop
// ends them and clears both. The port is one the kernel gives, tried on
// the other IPs (a few attempts, in case it is taken), as startBackends.
func (b *Backends) startHTTP(ctx context.Context, nginx, dir string) (stop func(), err error) {
	for range 5 {
		var stop func()
		if nginx != "" {
			stop, err = b.tryNginxHTTP(ctx, nginx, dir)
		} else {
			stop, err = b.tryGoHTTP()
		}
		if err == nil {
			return func() {
				stop()
				b.HTTPPort, b.HTTPServer = 0, ""
			}, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start http servers: %w", err)
}

// tryGoHTTP starts a Go HTTP server on each IP.
func (b *Backends) tryGoHTTP() (func(), error) {
	var srvs []*backends.HTTP
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
	}
	port := 0
	for _, ip := range b.IPs {
		s, err := backends.StartHTTP(net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			stop()
			return nil, err
		}
		srvs = append(srvs, s)
		port = s.Port()
	}
	b.HTTPPort, b.HTTPServer = port, httpServerGo
	return stop, nil
}

// tryNginxHTTP starts nginx on a port free on the first IP, and waits
// until every IP answers (nginx exits when a port is taken on another).
func (b *Backends) tryNginxHTTP(ctx context.Context, bin, dir string) (func(), error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(b.IPs[0], "0"))
	if err != nil {
		return nil, fmt.Errorf("start nginx http: a free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p, err := startNginxHTTP(bin, dir, b.IPs, port)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(b.IPs))
	for i, ip := range b.IPs {
		addrs[i] = net.JoinHostPort(ip, strconv.Itoa(port))
	}
	if _, err := awaitForwarding(ctx, p, addrs, ModeClose, time.Now(), httpReadyTimeout, nil); err != nil {
		p.Stop()
		return nil, fmt.Errorf("start nginx http: %w", err)
	}
	b.HTTPPort, b.HTTPServer = port, httpServerNginx
	return func() { p.Stop() }, nil
}
