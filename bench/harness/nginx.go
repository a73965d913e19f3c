package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// nginxStreamModule is where Debian's libnginx-mod-stream puts nginx's
// stream module; an nginx without it there has the module built in.
const nginxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// writeNginxConfig writes nginx's stream proxy for n UDP service ports:
// per port an upstream of every backend (round-robin, as kproxy balances)
// and a UDP server, set up as nginx's documentation advises for UDP load
// balancing: a worker per CPU, each with its own socket (reuseport).
func writeNginxConfig(dir string, n int, b *Backends) (string, error) {
	var c strings.Builder
	if _, err := os.Stat(nginxStreamModule); err == nil {
		fmt.Fprintf(&c, "load_module %s;\n", nginxStreamModule)
	}
	fmt.Fprintf(&c, "daemon off;\nworker_processes auto;\nworker_rlimit_nofile 65536;\npid %s;\nerror_log %s warn;\n"+
		"events {\n  worker_connections 16384;\n}\nstream {\n",
		filepath.Join(dir, "nginx.pid"), filepath.Join(dir, "nginx-error.log"))
	for i := range n {
		fmt.Fprintf(&c, "  upstream %s {\n", serviceName(i))
		for _, ip := range b.IPs {
			fmt.Fprintf(&c, "    server %s:%d;\n", ip, b.UDPPort)
		}
		fmt.Fprintf(&c, "  }\n  server {\n    listen %s:%d udp reuseport;\n    proxy_pass %s;\n    proxy_timeout 10s;\n  }\n",
			hostIP(nginxNet, i), udpServicePort, serviceName(i))
	}
	c.WriteString("}\n")
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(c.String()), 0o644); err != nil {
		return "", fmt.Errorf("nginx config: %w", err)
	}
	return path, nil
}

// startNginx runs nginx in the foreground on that config; its workers'
// CPU counts as its own.
func startNginx(bin, dir string, n int, b *Backends) (*Proc, error) {
	cfg, err := writeNginxConfig(dir, n, b)
	if err != nil {
		return nil, err
	}
	p, err := startProc(TargetNginx, filepath.Join(dir, "nginx.log"),
		[]string{bin, "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", cfg}, nil)
	if err != nil {
		return nil, err
	}
	p.Tree = true
	return p, nil
}
