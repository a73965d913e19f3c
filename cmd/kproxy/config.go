package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The config file holds kube-proxy's own KubeProxyConfiguration, so an
// operator can reuse the ConfigMap they have, and optionally a document of
// kproxy's own settings. Every setting is also a flag: the file is turned
// into flag values, and a flag given on the command line wins.
const (
	kubeProxyAPIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	kproxyAPIVersion    = "kproxy.io/v1alpha1"
	kproxyKind          = "KproxyConfiguration"
)

// KproxyConfiguration is kproxy's own document; each field is the flag of
// the same name.
type KproxyConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	Source           string `json:"source,omitempty"`
	Portal           string `json:"portal,omitempty"`
	NetshInterface   string `json:"netshInterface,omitempty"`
	ServiceProxyName string `json:"serviceProxyName,omitempty"`
	NodeZone         string `json:"nodeZone,omitempty"`
	Master           string `json:"master,omitempty"`
	// PreserveSourceIPForLocalTrafficPolicy: node-local endpoints of
	// externalTrafficPolicy Local services see the client's address.
	PreserveSourceIPForLocalTrafficPolicy *bool `json:"preserveSourceIPForLocalTrafficPolicy,omitempty"`
	// PreservePodSourceIP: every endpoint of a pod of this node sees the
	// pod's address (flag --preserve-pod-source-ip).
	PreservePodSourceIP *bool `json:"preservePodSourceIP,omitempty"`
	// ServiceClusterIPRange is the API server's --service-cluster-ip-range
	// (flag --service-cluster-ip-range); ClusterCIDR is also
	// KubeProxyConfiguration's clusterCIDR (flag --cluster-cidr).
	ServiceClusterIPRange string `json:"serviceClusterIPRange,omitempty"`
	ClusterCIDR           string `json:"clusterCIDR,omitempty"`
	FilePollInterval      string `json:"filePollInterval,omitempty"`
	UDPIdleTimeout        string `json:"udpIdleTimeout,omitempty"`
	LogLevel              string `json:"logLevel,omitempty"`
	LogFormat             string `json:"logFormat,omitempty"`
	// Hand-over to the next process.
	ShutdownGracePeriod string  `json:"shutdownGracePeriod,omitempty"`
	ProxyPortsFile      *string `json:"proxyPortsFile,omitempty"`

	Outliers *OutlierSettings `json:"outliers,omitempty"`
	Limits   *LimitSettings   `json:"limits,omitempty"`
	Metrics  *MetricsSettings `json:"metrics,omitempty"`
	Admin    *AdminSettings   `json:"admin,omitempty"`
	UI       *UISettings      `json:"ui,omitempty"`
	Tracing  *TracingSettings `json:"tracing,omitempty"`
	Remote   *RemoteSettings  `json:"remote,omitempty"`
}

// RemoteSettings is the remote section: remoting with a core (--source
// remote:ADDR), each field the flag --remote-<field>.
type RemoteSettings struct {
	Listen           string `json:"listen,omitempty"`
	Advertise        string `json:"advertise,omitempty"`
	TokenFile        string `json:"tokenFile,omitempty"`
	TLSCert          string `json:"tlsCert,omitempty"`
	TLSKey           string `json:"tlsKey,omitempty"`
	TLSCA            string `json:"tlsCA,omitempty"`
	AllowNonLoopback *bool  `json:"allowNonLoopback,omitempty"`
}

// TracingSettings is the tracing section of a KproxyConfiguration, shaped
// as Kubernetes components' TracingConfiguration (k8s.io/component-base).
type TracingSettings struct {
	Endpoint               string `json:"endpoint,omitempty"`
	SamplingRatePerMillion *int32 `json:"samplingRatePerMillion,omitempty"`
}

// OutlierSettings is the outliers section of a KproxyConfiguration.
type OutlierSettings struct {
	ConsecutiveFailures *int   `json:"consecutiveFailures,omitempty"`
	BaseEjectionTime    string `json:"baseEjectionTime,omitempty"`
	MaxEjectionTime     string `json:"maxEjectionTime,omitempty"`
}

// LimitSettings is the limits section of a KproxyConfiguration.
type LimitSettings struct {
	MaxConnections               *int64 `json:"maxConnections,omitempty"`
	MaxConnectionsPerServicePort *int64 `json:"maxConnectionsPerServicePort,omitempty"`
	MaxUDPFlows                  *int64 `json:"maxUDPFlows,omitempty"`
	MaxUDPFlowsPerServicePort    *int64 `json:"maxUDPFlowsPerServicePort,omitempty"`
	TCPIdleTimeout               string `json:"tcpIdleTimeout,omitempty"`
	TCPHalfCloseTimeout          string `json:"tcpHalfCloseTimeout,omitempty"`
	TCPKeepAlive                 string `json:"tcpKeepAlive,omitempty"`
	TCPEventLoops                *bool  `json:"tcpEventLoops,omitempty"`
}

// MetricsSettings is the metrics section of a KproxyConfiguration.
type MetricsSettings struct {
	ServicePortsLimit *int  `json:"servicePortsLimit,omitempty"`
	Actors            *bool `json:"actors,omitempty"`
}

// AdminSettings is the admin section of a KproxyConfiguration.
type AdminSettings struct {
	EnableFaultInjection *bool  `json:"enableFaultInjection,omitempty"`
	Address              string `json:"address,omitempty"`
	TokenFile            string `json:"tokenFile,omitempty"`
	AllowNonLoopback     *bool  `json:"allowNonLoopback,omitempty"`
}

// UISettings is the ui section of a KproxyConfiguration: the live view.
type UISettings struct {
	// Address is --ui-address; "" turns the live view off.
	Address          *string `json:"address,omitempty"`
	AllowNonLoopback *bool   `json:"allowNonLoopback,omitempty"`
}

// maxConfigBytes bounds the config file, as manifests are bounded.
const maxConfigBytes = 1 << 20

// loadConfig reads path and returns the flag values it sets, by flag
// name, and the kube-proxy fields it accepts but that mean nothing to a
// userspace proxy (to tell the operator).
func loadConfig(path string) (map[string]string, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("--config: %w", err)
	}
	if len(raw) > maxConfigBytes {
		return nil, nil, fmt.Errorf("--config %s: larger than %d KiB", path, maxConfigBytes>>10)
	}
	values, ignored, err := parseConfig(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return values, ignored, nil
}

// parseConfig decodes the documents strictly: an unknown or misspelt
// field is an error naming it.
func parseConfig(raw []byte) (map[string]string, []string, error) {
	values := map[string]string{}
	var ignored []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	seen := map[string]bool{}
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", n, err)
		}
		if tm.APIVersion == "" && tm.Kind == "" {
			continue // empty or comments only
		}
		key := tm.APIVersion + "/" + tm.Kind
		if seen[key] {
			return nil, nil, fmt.Errorf("document %d: a second %s", n, tm.Kind)
		}
		seen[key] = true
		switch {
		case tm.APIVersion == kubeProxyAPIVersion && tm.Kind == "KubeProxyConfiguration":
			var c kubeproxyconfig.KubeProxyConfiguration
			if err := decodeStrict(doc, &c); err != nil {
				return nil, nil, fmt.Errorf("document %d (KubeProxyConfiguration): %w", n, err)
			}
			ign, err := kubeProxyValues(&c, values)
			if err != nil {
				return nil, nil, fmt.Errorf("document %d (KubeProxyConfiguration): %w", n, err)
			}
			ignored = append(ignored, ign...)
		case tm.APIVersion == kproxyAPIVersion && tm.Kind == kproxyKind:
			var c KproxyConfiguration
			if err := decodeStrict(doc, &c); err != nil {
				return nil, nil, fmt.Errorf("document %d (%s): %w", n, kproxyKind, err)
			}
			kproxyValues(&c, values)
		default:
			return nil, nil, fmt.Errorf("document %d: %s %s: want %s KubeProxyConfiguration or %s %s", n, tm.APIVersion, tm.Kind, kubeProxyAPIVersion, kproxyAPIVersion, kproxyKind)
		}
	}
	return values, ignored, nil
}

// decodeStrict decodes one YAML document into v: unknown and duplicate
// fields are errors naming their path ("clientConnection.qpss"), and
// field names match case-sensitively (sigs.k8s.io/yaml alone accepts
// "BindAddress" for "bindAddress" and names only the last path element).
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func setIf(values map[string]string, flag, v string) {
	if v != "" {
		values[flag] = v
	}
}

func durationIf(values map[string]string, flag string, d metav1.Duration) {
	if d.Duration != 0 {
		values[flag] = d.Duration.String()
	}
}

// kubeProxyValues maps the KubeProxyConfiguration fields that mean
// something to kproxy onto its flags. A field kproxy cannot honour is an
// error; one that is meaningless for a userspace proxy (masquerading,
// local-traffic detection by interface...) is accepted and reported.
func kubeProxyValues(c *kubeproxyconfig.KubeProxyConfiguration, values map[string]string) ([]string, error) {
	switch c.Mode {
	case "":
	case "nftables", "iptables":
		values["portal"] = string(c.Mode)
	default:
		return nil, fmt.Errorf("mode %q: kproxy's portals are nftables and iptables (this file), or netsh and bind (the %s document's portal)", c.Mode, kproxyKind)
	}
	if c.BindAddressHardFail {
		return nil, errors.New("bindAddressHardFail: true: kproxy reports a listener it cannot open and retries it; it never exits for it")
	}
	if c.EnableProfiling {
		values["profiling"] = "true"
	}
	if c.WindowsRunAsService {
		return nil, errors.New("windowsRunAsService: true: run kproxy as a HostProcess container (deploy/daemonset-windows.yaml)")
	}
	cc := c.ClientConnection
	setIf(values, "kubeconfig", cc.Kubeconfig)
	if cc.QPS != 0 {
		values["kube-api-qps"] = strconv.FormatFloat(float64(cc.QPS), 'f', -1, 32)
	}
	if cc.Burst != 0 {
		values["kube-api-burst"] = strconv.Itoa(int(cc.Burst))
	}
	setIf(values, "node-name", c.HostnameOverride)
	setIf(values, "bind-address", c.BindAddress)
	setIf(values, "healthz-bind-address", c.HealthzBindAddress)
	setIf(values, "metrics-bind-address", c.MetricsBindAddress)
	durationIf(values, "config-sync-period", c.ConfigSyncPeriod)
	setIf(values, "port-range", c.PortRange)
	setIf(values, "cluster-cidr", c.ClusterCIDR)
	if m := string(c.DetectLocalMode); m == detectLocalClusterCIDR || m == detectLocalNodeCIDR {
		values["detect-local-mode"] = m
	}
	for _, a := range c.NodePortAddresses {
		if a == "primary" {
			return nil, errors.New(`nodePortAddresses: "primary" is not supported; list CIDRs`)
		}
	}
	setIf(values, "nodeport-addresses", strings.Join(c.NodePortAddresses, ","))
	// The sync periods of the mode in use; with no mode named, the
	// iptables section's, as kube-proxy's own conversion reads them.
	sync, minSync := c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod
	if c.Mode == "nftables" {
		sync, minSync = c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod
	}
	durationIf(values, "sync-period", sync)
	durationIf(values, "min-sync-period", minSync)
	ct := c.Conntrack
	if ct.MaxPerCore != nil {
		values["conntrack-max-per-core"] = strconv.Itoa(int(*ct.MaxPerCore))
	}
	if ct.Min != nil {
		values["conntrack-min"] = strconv.Itoa(int(*ct.Min))
	}
	if ct.TCPEstablishedTimeout != nil {
		values["conntrack-tcp-timeout-established"] = ct.TCPEstablishedTimeout.Duration.String()
	}
	if ct.TCPCloseWaitTimeout != nil {
		values["conntrack-tcp-timeout-close-wait"] = ct.TCPCloseWaitTimeout.Duration.String()
	}
	if ct.TCPBeLiberal {
		values["conntrack-tcp-be-liberal"] = "true"
	}
	durationIf(values, "conntrack-udp-timeout", ct.UDPTimeout)
	durationIf(values, "conntrack-udp-timeout-stream", ct.UDPStreamTimeout)

	var ignored []string
	for field, set := range map[string]bool{
		"detectLocalMode": c.DetectLocalMode != "" && c.DetectLocalMode != detectLocalClusterCIDR && c.DetectLocalMode != detectLocalNodeCIDR,
		"detectLocal":     c.DetectLocal.BridgeInterface != "" || c.DetectLocal.InterfaceNamePrefix != "",
		"oomScoreAdj":     c.OOMScoreAdj != nil, "featureGates": len(c.FeatureGates) > 0,
		"iptables.masquerade*": c.IPTables.MasqueradeAll || c.IPTables.MasqueradeBit != nil,
		"ipvs":                 c.IPVS.Scheduler != "" || len(c.IPVS.ExcludeCIDRs) > 0 || c.IPVS.StrictARP, "winkernel": c.Winkernel.NetworkName != "",
	} {
		if set {
			ignored = append(ignored, field)
		}
	}
	sort.Strings(ignored)
	return ignored, nil
}

func kproxyValues(c *KproxyConfiguration, values map[string]string) {
	setIf(values, "source", c.Source)
	setIf(values, "portal", c.Portal)
	setIf(values, "netsh-interface", c.NetshInterface)
	setIf(values, "service-proxy-name", c.ServiceProxyName)
	setIf(values, "node-zone", c.NodeZone)
	setIf(values, "master", c.Master)
	setIf(values, "service-cluster-ip-range", c.ServiceClusterIPRange)
	setIf(values, "cluster-cidr", c.ClusterCIDR)
	setIf(values, "file-poll-interval", c.FilePollInterval)
	setIf(values, "udp-idle-timeout", c.UDPIdleTimeout)
	setIf(values, "log-level", c.LogLevel)
	setIf(values, "log-format", c.LogFormat)
	itoa := func(flag string, v *int64) {
		if v != nil {
			values[flag] = strconv.FormatInt(*v, 10)
		}
	}
	boolean := func(flag string, v *bool) {
		if v != nil {
			values[flag] = strconv.FormatBool(*v)
		}
	}
	boolean("preserve-source-ip-for-local-traffic-policy", c.PreserveSourceIPForLocalTrafficPolicy)
	boolean("preserve-pod-source-ip", c.PreservePodSourceIP)
	if o := c.Outliers; o != nil {
		if o.ConsecutiveFailures != nil {
			values["outlier-consecutive-failures"] = strconv.Itoa(*o.ConsecutiveFailures)
		}
		setIf(values, "outlier-base-ejection-time", o.BaseEjectionTime)
		setIf(values, "outlier-max-ejection-time", o.MaxEjectionTime)
	}
	if l := c.Limits; l != nil {
		itoa("max-connections", l.MaxConnections)
		itoa("max-connections-per-service-port", l.MaxConnectionsPerServicePort)
		itoa("max-udp-flows", l.MaxUDPFlows)
		itoa("max-udp-flows-per-service-port", l.MaxUDPFlowsPerServicePort)
		setIf(values, "tcp-idle-timeout", l.TCPIdleTimeout)
		setIf(values, "tcp-half-close-timeout", l.TCPHalfCloseTimeout)
		setIf(values, "tcp-keepalive", l.TCPKeepAlive)
		boolean("tcp-event-loops", l.TCPEventLoops)
	}
	if m := c.Metrics; m != nil {
		if m.ServicePortsLimit != nil {
			values["metrics-service-ports-limit"] = strconv.Itoa(*m.ServicePortsLimit)
		}
		boolean("metrics-actors", m.Actors)
	}
	setIf(values, "shutdown-grace-period", c.ShutdownGracePeriod)
	if c.ProxyPortsFile != nil {
		values["proxy-ports-file"] = *c.ProxyPortsFile // "" turns it off
	}
	if t := c.Tracing; t != nil {
		setIf(values, "tracing-endpoint", t.Endpoint)
		if t.SamplingRatePerMillion != nil {
			values["tracing-sampling-rate-per-million"] = strconv.Itoa(int(*t.SamplingRatePerMillion))
		}
	}
	if a := c.Admin; a != nil {
		boolean("enable-fault-injection", a.EnableFaultInjection)
		setIf(values, "admin-address", a.Address)
		setIf(values, "admin-token-file", a.TokenFile)
		boolean("admin-allow-non-loopback", a.AllowNonLoopback)
	}
	if u := c.UI; u != nil {
		if u.Address != nil {
			values["ui-address"] = *u.Address
		}
		boolean("ui-allow-non-loopback", u.AllowNonLoopback)
	}
	if r := c.Remote; r != nil {
		setIf(values, "remote-listen", r.Listen)
		setIf(values, "remote-advertise", r.Advertise)
		setIf(values, "remote-token-file", r.TokenFile)
		setIf(values, "remote-tls-cert", r.TLSCert)
		setIf(values, "remote-tls-key", r.TLSKey)
		setIf(values, "remote-tls-ca", r.TLSCA)
		boolean("remote-allow-non-loopback", r.AllowNonLoopback)
	}
}

// given reports whether the flag name was set on the command line or by
// applyConfig.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// applyConfig sets fs's flags from the file's values, except those given
// on the command line.
func applyConfig(fs *flag.FlagSet, values map[string]string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if given[name] {
			continue
		}
		if err := fs.Set(name, values[name]); err != nil {
			return fmt.Errorf("--config: %s: %w", name, err)
		}
	}
	return nil
}

// writeConfig writes the effective settings (every flag's value) as the
// two documents, in a form --config reads back.
func writeConfig(w io.Writer, fs *flag.FlagSet) error {
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	dur := func(name string) metav1.Duration {
		d, _ := time.ParseDuration(get(name))
		return metav1.Duration{Duration: d}
	}
	i64 := func(name string) *int64 { v, _ := strconv.ParseInt(get(name), 10, 64); return &v }
	ptrBool := func(name string) *bool { v, _ := strconv.ParseBool(get(name)); return &v }
	qps, _ := strconv.ParseFloat(get("kube-api-qps"), 32)
	burst, _ := strconv.Atoi(get("kube-api-burst"))
	kp := kubeproxyconfig.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: kubeProxyAPIVersion, Kind: "KubeProxyConfiguration"},
		BindAddress:        get("bind-address"),
		HealthzBindAddress: get("healthz-bind-address"),
		MetricsBindAddress: get("metrics-bind-address"),
		EnableProfiling:    get("profiling") == "true",
		ConfigSyncPeriod:   dur("config-sync-period"),
		PortRange:          get("port-range"),
		ClusterCIDR:        get("cluster-cidr"),
		DetectLocalMode:    kubeproxyconfig.LocalMode(get("detect-local-mode")),
	}
	// The node name only when it is not this node's default, so one file
	// serves every node (as a ConfigMap must).
	if n := get("node-name"); n != defaultNodeName() {
		kp.HostnameOverride = n
	}
	kp.ClientConnection.Kubeconfig, kp.ClientConnection.QPS, kp.ClientConnection.Burst = get("kubeconfig"), float32(qps), int32(burst)
	kp.NFTables.SyncPeriod, kp.NFTables.MinSyncPeriod = dur("sync-period"), dur("min-sync-period")
	kp.IPTables.SyncPeriod, kp.IPTables.MinSyncPeriod = dur("sync-period"), dur("min-sync-period")
	if a := get("nodeport-addresses"); a != "" {
		kp.NodePortAddresses = strings.Split(a, ",")
	}
	kc := KproxyConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kproxyAPIVersion, Kind: kproxyKind},
		Source:   get("source"), Portal: get("portal"), NetshInterface: get("netsh-interface"),
		ServiceProxyName: get("service-proxy-name"), NodeZone: get("node-zone"), Master: get("master"),
		ServiceClusterIPRange: get("service-cluster-ip-range"),
		FilePollInterval:      get("file-poll-interval"), UDPIdleTimeout: get("udp-idle-timeout"),
		LogLevel: get("log-level"), LogFormat: get("log-format"),
	}
	if fs.Lookup("preserve-source-ip-for-local-traffic-policy") != nil {
		kc.PreserveSourceIPForLocalTrafficPolicy = ptrBool("preserve-source-ip-for-local-traffic-policy")
	}
	if fs.Lookup("preserve-pod-source-ip") != nil {
		kc.PreservePodSourceIP = ptrBool("preserve-pod-source-ip")
	}
	cf, _ := strconv.Atoi(get("outlier-consecutive-failures"))
	kc.Outliers = &OutlierSettings{&cf, get("outlier-base-ejection-time"), get("outlier-max-ejection-time")}
	kc.Limits = &LimitSettings{i64("max-connections"), i64("max-connections-per-service-port"), i64("max-udp-flows"), i64("max-udp-flows-per-service-port"),
		get("tcp-idle-timeout"), get("tcp-half-close-timeout"), get("tcp-keepalive"), ptrBool("tcp-event-loops")}
	spl, _ := strconv.Atoi(get("metrics-service-ports-limit"))
	kc.Metrics = &MetricsSettings{&spl, ptrBool("metrics-actors")}
	kc.Admin = &AdminSettings{ptrBool("enable-fault-injection"), get("admin-address"), get("admin-token-file"), ptrBool("admin-allow-non-loopback")}
	uiAddr := get("ui-address")
	kc.UI = &UISettings{&uiAddr, ptrBool("ui-allow-non-loopback")}
	kc.Remote = &RemoteSettings{get("remote-listen"), get("remote-advertise"), get("remote-token-file"), get("remote-tls-cert"),
		get("remote-tls-key"), get("remote-tls-ca"), ptrBool("remote-allow-non-loopback")}
	kc.ShutdownGracePeriod = get("shutdown-grace-period")
	ppf := get("proxy-ports-file")
	kc.ProxyPortsFile = &ppf
	rate, _ := strconv.Atoi(get("tracing-sampling-rate-per-million"))
	rate32 := int32(rate)
	kc.Tracing = &TracingSettings{get("tracing-endpoint"), &rate32}
	for i, doc := range []any{kp, kc} {
		raw, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		if i > 0 {
			io.WriteString(w, "---\n")
		}
		if _, err := w.Write(raw); err != nil {
			return err
		}
	}
	return nil
}
