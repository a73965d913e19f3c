package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The close mode's endpoint, where nginx is installed: one nginx process,
// apart from the UDP stream peer (its own config, pid and logs), serving
// HTTP on every backend IP at one port. One worker: its CPU is not what
// is measured.

// nginxHTTPName names the process and its files in the work directory.
const nginxHTTPName = "nginx-http"

// writeNginxHTTPConfig writes an HTTP server listening on ip:port for
// every ip, answering 200 "ok\n" to everything and closing after each
// response (keepalive_timeout 0), without an access log to write.
func writeNginxHTTPConfig(dir string, ips []string, port int, tempPaths []string) (string, error) {
	var c strings.Builder
	fmt.Fprintf(&c, "daemon off;\nworker_processes 1;\nworker_rlimit_nofile 65536;\npid %s;\nerror_log %s warn;\n"+
		"events {\n  worker_connections 16384;\n}\nhttp {\n  access_log off;\n  keepalive_timeout 0;\n",
		filepath.Join(dir, nginxHTTPName+".pid"), filepath.Join(dir, nginxHTTPName+"-error.log"))
	for _, t := range tempPaths {
		fmt.Fprintf(&c, "  %s %s;\n", t, filepath.Join(dir, nginxHTTPName+"-"+strings.TrimSuffix(t, "_temp_path")))
	}
	c.WriteString("  server {\n")
	for _, ip := range ips {
		// backlog as Go's listeners take it (somaxconn), so a burst of
		// connections is not dropped by nginx's default of 511 alone.
		fmt.Fprintf(&c, "    listen %s:%d backlog=4096;\n", ip, port)
	}
	c.WriteString("    location / {\n      return 200 \"ok\\n\";\n    }\n  }\n}\n")
	path := filepath.Join(dir, nginxHTTPName+".conf")
	if err := os.WriteFile(path, []byte(c.String()), 0o644); err != nil {
		return "", fmt.Errorf("nginx http config: %w", err)
	}
	return path, nil
}

// nginxHTTPTempPaths are the temp path directives of the HTTP modules an
// nginx has, from its `nginx -V`: each module makes its compiled-in
// directory at start (Debian's are under /var/lib/nginx, root's), so the
// config moves them into the work directory, where any user may make them.
func nginxHTTPTempPaths(version string) []string {
	out := []string{"client_body_temp_path"}
	for _, m := range []string{"proxy", "fastcgi", "uwsgi", "scgi"} {
		if !strings.Contains(version, "--without-http_"+m+"_module") {
			out = append(out, m+"_temp_path")
		}
	}
	return out
}

// startNginxHTTP runs that nginx in the foreground.
func startNginxHTTP(bin, dir string, ips []string, port int) (*Proc, error) {
	version, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("start nginx http: %s -V: %w", bin, err)
	}
	cfg, err := writeNginxHTTPConfig(dir, ips, port, nginxHTTPTempPaths(string(version)))
	if err != nil {
		return nil, err
	}
	p, err := startProc(nginxHTTPName, filepath.Join(dir, nginxHTTPName+".log"),
		[]string{bin, "-p", dir, "-e", filepath.Join(dir, nginxHTTPName+"-error.log"), "-c", cfg}, nil)
	if err != nil {
		return nil, fmt.Errorf("start nginx http: %w", err)
	}
	p.Tree = true
	return p, nil
}
