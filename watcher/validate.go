package watcher

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The API server validates objects before an informer sees them, but a
// file source gets whatever a user typed. These checks cover what would
// otherwise make the proxy misbehave (a port it cannot bind, an address it
// cannot parse), each error naming the field the way kubectl does.

// maxAffinityTimeout is the API server's limit for ClientIP affinity (1 day).
const maxAffinityTimeout = 86400

// errorList reports every problem of one object at once, so a user fixes a
// file in one round instead of one error per reload.
type errorList []error

func (l errorList) Error() string {
	msgs := make([]string, len(l))
	for i, err := range l {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (l errorList) Unwrap() []error { return l }

// orNil returns the list as an error, or nil when it is empty (a nil
// errorList in an error interface would not compare equal to nil).
func (l errorList) orNil() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// validateService checks a service that Skip has accepted.
func validateService(svc *corev1.Service) error {
	var errs errorList
	if svc.Name == "" {
		errs = append(errs, fmt.Errorf("metadata.name: required"))
	}
	switch svc.Spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		errs = append(errs, fmt.Errorf("spec.type: unsupported value %q (want ClusterIP, NodePort, LoadBalancer or ExternalName)", svc.Spec.Type))
	}
	errs = append(errs, validatePorts(svc.Spec.Ports)...)
	errs = append(errs, validateServiceIPs(svc)...)

	switch svc.Spec.SessionAffinity {
	case "", corev1.ServiceAffinityNone:
	case corev1.ServiceAffinityClientIP:
		if t := affinityTimeout(svc); t != nil && (*t < 1 || *t > maxAffinityTimeout) {
			errs = append(errs, fmt.Errorf("spec.sessionAffinityConfig.clientIP.timeoutSeconds: %d is not in 1-%d", *t, maxAffinityTimeout))
		}
	default:
		errs = append(errs, fmt.Errorf("spec.sessionAffinity: unsupported value %q (want None or ClientIP)", svc.Spec.SessionAffinity))
	}

	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster && *p != corev1.ServiceInternalTrafficPolicyLocal {
		errs = append(errs, fmt.Errorf("spec.internalTrafficPolicy: unsupported value %q (want Cluster or Local)", *p))
	}
	switch svc.Spec.ExternalTrafficPolicy {
	case "", corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal:
	default:
		errs = append(errs, fmt.Errorf("spec.externalTrafficPolicy: unsupported value %q (want Cluster or Local)", svc.Spec.ExternalTrafficPolicy))
	}
	if p := svc.Spec.HealthCheckNodePort; p != 0 && !validPort(p) {
		errs = append(errs, fmt.Errorf("spec.healthCheckNodePort: %d is not in 1-65535", p))
	}
	return errs.orNil()
}

// validatePorts checks each port and that ports are distinguishable: the
// port name is part of the ServicePortKey, so two ports may not share a
// name (including the empty one), and two ports may not claim the same
// number and protocol, which would be two listeners on one socket.
func validatePorts(ports []corev1.ServicePort) errorList {
	var errs errorList
	names := make(map[string]int)
	numbers := make(map[string]int)
	for i, p := range ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		if !validPort(p.Port) {
			errs = append(errs, fmt.Errorf("%s.port: %d is not in 1-65535", field, p.Port))
		}
		if _, ok := parseProtocol(p.Protocol); !ok {
			errs = append(errs, fmt.Errorf("%s.protocol: unsupported value %q (want TCP, UDP or SCTP)", field, p.Protocol))
		}
		if p.NodePort != 0 && !validPort(p.NodePort) {
			errs = append(errs, fmt.Errorf("%s.nodePort: %d is not in 1-65535", field, p.NodePort))
		}
		errs = append(errs, validateTargetPort(field+".targetPort", p.TargetPort)...)

		if j, dup := names[p.Name]; dup {
			if p.Name == "" {
				errs = append(errs, fmt.Errorf("%s.name: required, spec.ports[%d] is unnamed too (a service with several ports must name them)", field, j))
			} else {
				errs = append(errs, fmt.Errorf("%s.name: duplicate %q (also spec.ports[%d])", field, p.Name, j))
			}
		} else {
			names[p.Name] = i
		}
		protocol := p.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		number := fmt.Sprintf("%d/%s", p.Port, protocol)
		if j, dup := numbers[number]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate port %s (also spec.ports[%d])", field, number, j))
		} else {
			numbers[number] = i
		}
	}
	return errs
}

// validateTargetPort accepts a port number or a container port name
// (IANA_SVC_NAME, as the API server requires); zero or empty means "same
// as port".
func validateTargetPort(field string, tp intstr.IntOrString) errorList {
	switch {
	case tp.Type == intstr.Int && tp.IntVal != 0 && !validPort(tp.IntVal):
		return errorList{fmt.Errorf("%s: %d is not in 1-65535", field, tp.IntVal)}
	case tp.Type == intstr.String && tp.StrVal != "":
		if msgs := validation.IsValidPortName(tp.StrVal); len(msgs) > 0 {
			return errorList{fmt.Errorf("%s: %q is not a valid port name: %s", field, tp.StrVal, strings.Join(msgs, ", "))}
		}
	}
	return nil
}

// validateServiceIPs checks every address the proxy would listen on.
func validateServiceIPs(svc *corev1.Service) errorList {
	var errs errorList
	checkIP := func(field, ip string) {
		if ip == corev1.ClusterIPNone && strings.HasPrefix(field, "spec.clusterIP") {
			return // headless
		}
		if _, ok := parseIP(ip); !ok {
			errs = append(errs, fmt.Errorf("%s: %q is not a valid IP address", field, ip))
		}
	}
	if svc.Spec.ClusterIP != "" {
		checkIP("spec.clusterIP", svc.Spec.ClusterIP)
	}
	for i, ip := range svc.Spec.ClusterIPs {
		checkIP(fmt.Sprintf("spec.clusterIPs[%d]", i), ip)
	}
	// Kubernetes keeps clusterIP as a copy of the primary clusterIPs entry;
	// disagreeing values are a typo we should not guess about.
	if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) > 0 && !sameIP(svc.Spec.ClusterIP, svc.Spec.ClusterIPs[0]) {
		errs = append(errs, fmt.Errorf("spec.clusterIPs[0]: %q must equal spec.clusterIP %q", svc.Spec.ClusterIPs[0], svc.Spec.ClusterIP))
	}
	for i, ip := range svc.Spec.ExternalIPs {
		checkIP(fmt.Sprintf("spec.externalIPs[%d]", i), ip)
	}
	if svc.Spec.LoadBalancerIP != "" {
		checkIP("spec.loadBalancerIP", svc.Spec.LoadBalancerIP)
	}
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			checkIP(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP)
		}
	}
	return errs
}

// ValidateEndpointSlice checks a slice read from a file. BuildServicePorts
// itself trusts slices (the API server validated them), so the file source
// runs this first and drops a bad slice with an error naming the field.
func ValidateEndpointSlice(s *discoveryv1.EndpointSlice) error {
	var errs errorList
	if s.Name == "" {
		errs = append(errs, fmt.Errorf("metadata.name: required"))
	}
	var wantV4 bool
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4:
		wantV4 = true
	case discoveryv1.AddressTypeIPv6:
	case discoveryv1.AddressTypeFQDN:
		return errs.orNil() // never proxied, so its contents do not matter
	default:
		errs = append(errs, fmt.Errorf("addressType: unsupported value %q (want IPv4, IPv6 or FQDN)", s.AddressType))
	}
	for i, p := range s.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.Port == nil {
			errs = append(errs, fmt.Errorf("%s.port: required", field))
		} else if !validPort(*p.Port) {
			errs = append(errs, fmt.Errorf("%s.port: %d is not in 1-65535", field, *p.Port))
		}
		if p.Protocol != nil {
			if _, ok := parseProtocol(*p.Protocol); !ok {
				errs = append(errs, fmt.Errorf("%s.protocol: unsupported value %q (want TCP, UDP or SCTP)", field, *p.Protocol))
			}
		}
	}
	for i, ep := range s.Endpoints {
		field := fmt.Sprintf("endpoints[%d].addresses", i)
		if len(ep.Addresses) == 0 {
			errs = append(errs, fmt.Errorf("%s: at least one address is required", field))
		}
		for j, a := range ep.Addresses {
			ip, ok := parseIP(a)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s[%d]: %q is not a valid IP address", field, j, a))
			case s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6:
				// Family unknown; addressType already reported.
			case ip.Is4() != wantV4:
				errs = append(errs, fmt.Errorf("%s[%d]: %q does not match addressType %s", field, j, a, s.AddressType))
			}
		}
	}
	return errs.orNil()
}

func validPort(p int32) bool { return p >= 1 && p <= 65535 }

// sameIP compares two addresses as parsed ("198.018.0.10" is 198.18.0.10),
// or as text when either does not parse.
func sameIP(a, b string) bool {
	ia, okA := parseIP(a)
	ib, okB := parseIP(b)
	if okA && okB {
		return ia == ib
	}
	return a == b
}
