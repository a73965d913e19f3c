package watcher

import (
	"errors"
	"net/netip"
	"strconv"

	"github.com/rs/zerolog"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kproxy/kproxy/messages"
)

// LabelServiceProxyName marks a service as owned by an alternative proxy.
// kube-proxy ignores such services; a proxy started with the matching name
// handles only them. kproxy follows the same contract.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Options is what a source needs to know about the node it runs on.
type Options struct {
	// NodeName marks endpoints on this node as Local, which Local traffic
	// policies depend on.
	NodeName string
	// ServiceProxyName, when set, restricts this proxy to services labelled
	// service.kubernetes.io/service-proxy-name=<ServiceProxyName>.
	ServiceProxyName string
	// Zone is this node's topology.kubernetes.io/zone, for topology hints.
	Zone string
	// TopologyLog, when set, gets kube-proxy's topology log lines (hints
	// ignored, and why) at debug and trace level.
	TopologyLog *zerolog.Logger
	// PreserveSourceIPForLocalTrafficPolicy makes every service with
	// externalTrafficPolicy Local dial its node-local endpoints from the
	// client's address, as kproxy.io/preserve-source-ip "true" does (the
	// annotation "false" opts a service out).
	PreserveSourceIPForLocalTrafficPolicy bool
}

// Skip reports whether this proxy must ignore svc, and why. The rules are
// kube-proxy's: services without a virtual IP to proxy (ExternalName,
// headless) and services another proxy owns are not ours.
func Skip(svc *corev1.Service, opts Options) (reason string, skip bool) {
	if svc == nil {
		return "nil service", true
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return "type ExternalName is resolved by DNS, not proxied", true
	}
	// kube-proxy skips headless services; a named proxier (KPNG's
	// specialized backends) gets them, to serve their external IPs.
	if opts.ServiceProxyName == "" {
		if headless(svc) {
			return "headless (clusterIP None) is resolved by DNS, not proxied", true
		}
		if _, ok := svc.Labels[corev1.IsHeadlessService]; ok {
			return "labelled " + corev1.IsHeadlessService, true
		}
	}
	owner, labelled := svc.Labels[LabelServiceProxyName]
	switch {
	case opts.ServiceProxyName == "" && labelled:
		return "owned by service proxy " + strconv.Quote(owner), true
	case opts.ServiceProxyName != "" && owner != opts.ServiceProxyName:
		return "not labelled " + LabelServiceProxyName + "=" + opts.ServiceProxyName, true
	}
	return "", false
}

// BuildServicePorts translates one service and its EndpointSlices into one
// ServicePortEndpoints per service port, as this node should serve them.
//
// slices may hold any slices; only those of this service are used, so a
// caller can pass everything it has for the namespace. A service that Skip
// rejects yields no ports and no error (call Skip first to learn why). An
// invalid service yields an error naming the offending fields (for example
// "spec.ports[1].port: 70000 is not in 1-65535") and no ports; the caller
// adds which object it was.
func BuildServicePorts(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, opts Options) ([]*messages.ServicePortEndpoints, error) {
	if svc == nil {
		return nil, errors.New("nil service")
	}
	if _, skip := Skip(svc, opts); skip {
		return nil, nil
	}
	if err := validateService(svc); err != nil {
		return nil, err
	}
	return buildValidServicePorts(svc, slices, opts), nil
}

// buildValidServicePorts is BuildServicePorts of a service that Skip keeps
// and validateService accepted.
func buildValidServicePorts(svc *corev1.Service, slices []*discoveryv1.EndpointSlice, opts Options) []*messages.ServicePortEndpoints {
	return withEndpoints(definePorts(svc, opts), slicesOf(svc, slices, opts), opts)
}

// portDefinition is one port of a Service as this proxy serves it,
// translated once when the Service arrives (annotations and source ranges
// parsed then): an EndpointSlice change builds endpoints only. Its
// ServicePort message is shared by every build until the Service changes,
// on every node, so the Tracker's diff finds it unchanged by identity.
type portDefinition struct {
	port   *corev1.ServicePort
	sp     *messages.ServicePort // never changed once built: messages share it
	policy scopePolicy
}

// definePorts translates each port of a service that Skip keeps and
// validateService accepted. Nothing in it depends on the node.
func definePorts(svc *corev1.Service, opts Options) []portDefinition {
	defs := make([]portDefinition, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		port := &svc.Spec.Ports[i]
		sp := servicePort(svc, port)
		preserve, err := portPreserveSourceIP(svc, port, opts)
		if err != nil {
			sp.AnnotationErrors = append(sp.AnnotationErrors, err.Error())
		}
		sp.PreserveSourceIp = preserve
		defs = append(defs, portDefinition{port: port, sp: sp, policy: scopePolicy{
			internalLocal: sp.GetInternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
			externalLocal: sp.GetExternalTrafficPolicy() == messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL,
			externallyAccessible: sp.GetNodePort() != 0 || sp.GetExternalIps().Len() > 0 ||
				sp.GetLoadBalancerIps().Len() > 0,
		}})
	}
	return defs
}

// servicePort maps one port of an already validated service to the model.
func servicePort(svc *corev1.Service, port *corev1.ServicePort) *messages.ServicePort {
	protocol, _ := parseProtocol(port.Protocol)
	sp := &messages.ServicePort{
		Key: &messages.ServicePortKey{
			Namespace: NamespaceOf(svc.Namespace),
			Name:      svc.Name,
			PortName:  port.Name,
			Protocol:  protocol,
		},
		Type:                  string(svc.Spec.Type),
		Port:                  port.Port,
		NodePort:              port.NodePort,
		ClusterIps:            ipSet(clusterIPs(svc)...),
		ExternalIps:           ipSet(svc.Spec.ExternalIPs...),
		LoadBalancerIps:       ipSet(loadBalancerIPs(svc)...),
		HealthCheckNodePort:   svc.Spec.HealthCheckNodePort,
		Headless:              headless(svc),
		InternalTrafficPolicy: messages.TrafficPolicy_TRAFFIC_POLICY_CLUSTER,
		ExternalTrafficPolicy: messages.TrafficPolicy_TRAFFIC_POLICY_CLUSTER,
	}
	sp.LoadBalancerSourceRanges, _ = loadBalancerSourceRanges(svc)
	pp, err := portProxyProtocol(svc, port)
	if err != nil {
		sp.AnnotationErrors = append(sp.AnnotationErrors, err.Error())
	}
	sp.ProxyProtocol = pp
	if sp.Type == "" {
		sp.Type = string(corev1.ServiceTypeClusterIP)
	}

	// A target port is a number or the name of a container port; unset
	// means "the same as port", as the API server would default it.
	switch {
	case port.TargetPort.Type == intstr.String && port.TargetPort.StrVal != "":
		sp.TargetPortName = port.TargetPort.StrVal
	case port.TargetPort.Type == intstr.Int && port.TargetPort.IntVal != 0:
		sp.TargetPort = port.TargetPort.IntVal
	default:
		sp.TargetPort = port.Port
	}

	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		sp.SessionAffinity = messages.SessionAffinity_CLIENT_IP
		sp.AffinityTimeoutSeconds = corev1.DefaultClientIPServiceAffinitySeconds
		if t := affinityTimeout(svc); t != nil {
			sp.AffinityTimeoutSeconds = *t
		}
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		sp.InternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		sp.ExternalTrafficPolicy = messages.TrafficPolicy_TRAFFIC_POLICY_LOCAL
	}
	return sp
}

// headless reports clusterIP None.
func headless(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP == corev1.ClusterIPNone || (len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone)
}

// clusterIPs prefers spec.clusterIPs (dual-stack) and falls back to the
// older single spec.clusterIP, which objects written by hand often use.
func clusterIPs(svc *corev1.Service) []string {
	if headless(svc) {
		return nil
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		return svc.Spec.ClusterIPs
	}
	if svc.Spec.ClusterIP != "" {
		return []string{svc.Spec.ClusterIP}
	}
	return nil
}

// loadBalancerIPs gathers the addresses a load balancer delivers traffic to:
// the ingress IPs the cloud reported (hostname-only ingress has none) and the
// deprecated, user-requested spec.loadBalancerIP.
//
// An ingress IP whose ipMode is not VIP (Proxy: the load balancer proxies
// to the node rather than delivering packets for its IP) gets no rule, as
// kube-proxy's IsVIPMode decides; unset means VIP. Nor does
// spec.loadBalancerIP when an ingress reports that same IP in Proxy mode.
func loadBalancerIPs(svc *corev1.Service) []string {
	var ips []string
	proxied := map[netip.Addr]bool{}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		if !vipMode(ing) {
			if addr, ok := parseIP(ing.IP); ok {
				proxied[addr] = true
			}
			continue
		}
		ips = append(ips, ing.IP)
	}
	if ip := svc.Spec.LoadBalancerIP; ip != "" {
		if addr, ok := parseIP(ip); !ok || !proxied[addr] {
			ips = append(ips, ip)
		}
	}
	return ips
}

// vipMode is kube-proxy's IsVIPMode: only an unset or VIP ipMode is one.
func vipMode(ing corev1.LoadBalancerIngress) bool {
	return ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP
}

// affinityTimeout is the configured ClientIP timeout, or nil when unset.
func affinityTimeout(svc *corev1.Service) *int32 {
	cfg := svc.Spec.SessionAffinityConfig
	if cfg == nil || cfg.ClientIP == nil {
		return nil
	}
	return cfg.ClientIP.TimeoutSeconds
}

// parseProtocol maps a Kubernetes protocol; empty means TCP, the API
// server's default.
func parseProtocol(p corev1.Protocol) (messages.Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return messages.Protocol_TCP, true
	case corev1.ProtocolUDP:
		return messages.Protocol_UDP, true
	case corev1.ProtocolSCTP:
		return messages.Protocol_SCTP, true
	}
	return messages.Protocol_PROTOCOL_UNSPECIFIED, false
}

// NamespaceOf applies the API server's default: objects written without a
// namespace land in "default".
func NamespaceOf(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
