package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// A proxy ports file another node's kproxy wrote (a host path shared
// between nodes by mistake, as a test cluster's nodes once shared
// /run/kproxy) is not taken: its ports mean nothing on this node, and
// claiming them would put this node's sockets of one service port in the
// SO_REUSEPORT group of another. This node's own file is taken, and so is
// one written before files named their node.
func TestProxyPortsFileOfAnotherNode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy-ports.json")
	for _, c := range []struct {
		name, content string
		want          int
	}{
		{"another node's", `{"version":1,"nodeName":"node-2","servicePorts":{"default/web:http/TCP":{"proxy":40001}}}`, 0},
		{"this node's", `{"version":1,"nodeName":"node-1","servicePorts":{"default/web:http/TCP":{"proxy":40001}}}`, 40001},
		{"unnamed (older)", `{"version":1,"servicePorts":{"default/web:http/TCP":{"proxy":40001}}}`, 40001},
	} {
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got := loadProxyPorts(path, "node-1", zerolog.Nop())["default/web:http/TCP"].Proxy
		if got != c.want {
			t.Errorf("%s file: proxy port %d taken, want %d", c.name, got, c.want)
		}
	}
}
