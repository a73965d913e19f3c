package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kproxy/kproxy/test/backends"
)

func main() {
	httpAddrs := flag.String("http", "127.0.0.11:9000,127.0.0.12:9000,127.0.0.13:9000", "comma-separated HTTP backend addresses")
	udpAddrs := flag.String("udp", "127.0.0.11:9053,127.0.0.12:9053", "comma-separated UDP echo backend addresses")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	for _, addr := range split(*httpAddrs) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatalf("demo backend %s: %v", addr, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from backend %s (you are %s)\n", addr, r.RemoteAddr)
		})}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(os.Stderr, "demo-backends: http on %s\n", addr)
	}
	for _, addr := range split(*udpAddrs) {
		b, err := backends.StartUDP(addr, addr)
		if err != nil {
			log.Fatalf("demo backend %s: %v", addr, err)
		}
		defer b.Close()
		fmt.Fprintf(os.Stderr, "demo-backends: udp echo on %s\n", addr)
	}
	<-ctx.Done()
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
