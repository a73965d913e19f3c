// Package healthcheck serves kube-proxy's health contract: the proxy's own
// /healthz and /livez (ProxyHealth, on --healthz-bind-address, what the
// kubelet's probes and cloud load balancers ask), and a health-check node
// port per externalTrafficPolicy: Local service (Services), which a cloud
// load balancer asks to learn whether this node has local endpoints.
// Bodies and status codes are kube-proxy's (pkg/proxy/healthcheck), so
// existing probes and load balancers work unchanged.
package healthcheck
