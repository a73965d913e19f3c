package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/kproxy/kproxy/portal/datapath"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/watcher"
	"github.com/kproxy/kproxy/watcher/filesource"
	"github.com/kproxy/kproxy/watcher/kubesource"
)

// sourceFlags are the flags that choose and configure where services come
// from; run and watch share them. Names follow kube-proxy.
type sourceFlags struct {
	source           string
	kubeconfig       string
	master           string
	kubeAPIQPS       float64
	kubeAPIBurst     int
	configSyncPeriod time.Duration
	minSyncPeriod    time.Duration
	filePollInterval time.Duration
	nodeName         string
	nodeZone         string
	serviceProxyName string
	// preserveSourceIPForLocal: watcher.Options.PreserveSourceIPForLocalTrafficPolicy;
	// preserveSourceIPGiven: set on the command line or in the config file
	// (else the default follows the portal mode, see run).
	preserveSourceIPForLocal, preserveSourceIPGiven bool
	remote                                          remoteFlags
	// apiConns are the connections to the API server (--source kube), for
	// the admin API's fault that breaks them.
	apiConns *kubesource.APIConns
}

func (f *sourceFlags) register(fs *flag.FlagSet) {
	nodeName := defaultNodeName()
	fs.StringVar(&f.source, "source", "", "where services come from: kube (the Kubernetes API), file:PATH (a YAML/JSON file or directory of Service and EndpointSlice manifests) or remote:ADDR[,ADDR...] (a core, kproxy watch --serve, over protoactor remoting; several core replicas' addresses, comma-separated)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --source kube (default $KUBECONFIG, else in-cluster)")
	fs.StringVar(&f.master, "master", "", "API server address, overriding the kubeconfig's")
	fs.Float64Var(&f.kubeAPIQPS, "kube-api-qps", 5, "queries per second to the API server")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 10, "burst of queries to the API server")
	fs.DurationVar(&f.configSyncPeriod, "config-sync-period", kubesource.DefaultResyncPeriod, "how often informers replay their cache")
	fs.DurationVar(&f.minSyncPeriod, "min-sync-period", actors.DefaultMinSyncPeriod, "the minimum interval between two applications of changes that program portal rules or open listeners, under sustained churn; such a change after a quiet period is applied at once, and a change of only endpoints is never paced")
	fs.DurationVar(&f.filePollInterval, "file-poll-interval", filesource.DefaultPollInterval, "how often a file source checks for changes")
	fs.StringVar(&f.nodeName, "node-name", nodeName, "this node's name, for endpoint locality and topology (default $NODE_NAME or the hostname)")
	fs.StringVar(&f.nodeZone, "node-zone", "", "this node's topology.kubernetes.io/zone, for zone hints (hints.forZones), with --source file:PATH, which has no Node objects; --source kube reads the label off the Node")
	fs.StringVar(&f.serviceProxyName, "service-proxy-name", "", "serve only services labelled service.kubernetes.io/service-proxy-name=NAME")
	fs.BoolVar(&f.preserveSourceIPForLocal, "preserve-source-ip-for-local-traffic-policy", true, "dial the node-local endpoints of every externalTrafficPolicy Local service from the client's own address (transparent proxying, kernel portal modes; the default is false in the bind and netsh modes, which cannot), as the annotation kproxy.io/preserve-source-ip \"true\" does per service; \"false\" opts a service out")
	f.remote.register(fs)
}

// defaultNodeName is $NODE_NAME (the downward API's), else the hostname.
func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	hostname, _ := os.Hostname()
	return hostname
}

func (f *sourceFlags) validate() error {
	switch {
	case f.source == "":
		return errors.New("--source is required: kube, file:PATH or remote:ADDR")
	case f.source == "kube":
	case f.isRemote():
		addrs := splitList(f.remoteAddr())
		if len(addrs) == 0 {
			return fmt.Errorf("--source %q: no core address", f.source)
		}
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("--source %q: %w", f.source, err)
			}
		}
		if err := f.remote.checkListen("--remote-listen", f.remote.listen); err != nil {
			return err
		}
	case strings.HasPrefix(f.source, "file:") && len(f.source) > len("file:"):
		if _, err := os.Stat(f.filePath()); err != nil {
			return fmt.Errorf("--source: %w", err)
		}
	default:
		return fmt.Errorf("--source %q: want kube, file:PATH or remote:ADDR", f.source)
	}
	if f.nodeZone != "" && !f.isFile() {
		// The Node's label (kube) or the core (remote) decides the zone.
		return fmt.Errorf("--node-zone %q: only for --source file:PATH; --source kube reads the Node's %s label", f.nodeZone, corev1.LabelTopologyZone)
	}
	if err := f.remote.validate(); err != nil {
		return err
	}
	if f.kubeAPIQPS <= 0 || f.kubeAPIBurst <= 0 {
		return errors.New("--kube-api-qps and --kube-api-burst must be positive")
	}
	return nil
}

// resolvePreserveSourceIP: unless given, preserving the client's address
// for externalTrafficPolicy Local follows the portal mode, on where its
// rules can bring the replies back (kube-proxy's behaviour), off where they
// cannot (no warning per service then).
func (f *sourceFlags) resolvePreserveSourceIP(mode string) {
	if !f.preserveSourceIPGiven {
		f.preserveSourceIPForLocal = datapath.Transparent(mode)
	}
}

func (f *sourceFlags) isKube() bool   { return f.source == "kube" }
func (f *sourceFlags) isRemote() bool { return strings.HasPrefix(f.source, "remote:") }
func (f *sourceFlags) isFile() bool   { return strings.HasPrefix(f.source, "file:") }
func (f *sourceFlags) remoteAddr() string {
	return strings.TrimPrefix(f.source, "remote:")
}
func (f *sourceFlags) filePath() string { return strings.TrimPrefix(f.source, "file:") }
func (f *sourceFlags) options() watcher.Options {
	return watcher.Options{NodeName: f.nodeName, Zone: f.nodeZone, ServiceProxyName: f.serviceProxyName,
		PreserveSourceIPForLocalTrafficPolicy: f.preserveSourceIPForLocal}
}

// kubeClient builds the client as kube-proxy does: --kubeconfig, else
// $KUBECONFIG, else in-cluster; --master overrides the server. Protobuf on
// the wire, as kube-proxy uses.
func (f *sourceFlags) kubeClient() (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if f.kubeconfig == "" && os.Getenv("KUBECONFIG") == "" && f.master == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = f.kubeconfig
		overrides := &clientcmd.ConfigOverrides{}
		overrides.ClusterInfo.Server = f.master
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(f.kubeAPIQPS), f.kubeAPIBurst
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = "kproxy/" + version
	if f.apiConns != nil {
		cfg.Dial = f.apiConns.DialContext
	}
	// After an outage, resume as soon as the API server answers rather
	// than when client-go's backoff says (see kubesource.APIGate).
	cfg.Wrap(kubesource.NewAPIGate().Wrap)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// source is what run and watch need of the source --source names: a View
// of the node-local state, Start, which returns once the source is complete
// (informer caches synced, the file read) and then notifies every service
// that changes, and Stop.
type source interface {
	watcher.View
	Start(ctx context.Context, notify func(watcher.Event)) error
	Stop()
}

var (
	_ source = (*kubesource.Source)(nil)
	_ source = (*filesource.FileSource)(nil)
	_ source = (*remote.Source)(nil)
)

// newSource builds the source of --source.
func (f *sourceFlags) newSource(log zerolog.Logger, clientName string) (source, error) {
	if f.isRemote() {
		rc, err := f.remote.config(f.remote.listen, log)
		if err != nil {
			return nil, err
		}
		return remote.NewSource(remote.SourceConfig{Core: f.remoteAddr(), NodeName: f.nodeName, Client: clientName,
			Remote: rc, Log: log}), nil
	}
	if !f.isKube() {
		return filesource.NewFileSource(f.filePath(), f.options(), f.filePollInterval, log), nil
	}
	routeKlog(log)
	f.apiConns = kubesource.NewAPIConns()
	client, err := f.kubeClient()
	if err != nil {
		return nil, err
	}
	return kubesource.New(client, kubesource.Options{Options: f.options(), ResyncPeriod: f.configSyncPeriod, Log: log})
}

// newNodeViews builds the source of --source for a core: one watch serving
// every node's view (every Node watched, for zones).
func (f *sourceFlags) newNodeViews(log zerolog.Logger) (watcher.NodeViews, error) {
	if !f.isKube() {
		return filesource.NewNodesFileSource(f.filePath(), f.options(), f.filePollInterval, log), nil
	}
	routeKlog(log)
	client, err := f.kubeClient()
	if err != nil {
		return nil, err
	}
	return kubesource.New(client, kubesource.Options{Options: f.options(), ResyncPeriod: f.configSyncPeriod, Log: log, AllNodes: true})
}
