// Command coredns is CoreDNS with the plugins a cluster's DNS needs
// (kubernetes, cache, health, ready, errors, log, loadbalance) and hosts
// (an e2e spec runs a server of its own from a hosts block), in the order
// CoreDNS's plugin.cfg gives them: the cluster DNS of test/cluster.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "hosts", "kubernetes"}
}

func main() { coremain.Run() }
