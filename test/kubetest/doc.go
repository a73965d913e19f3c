// Package kubetest runs a real kube-apiserver (with an embedded etcd) for tests:
// test/k8s/cmd/kube-apiserver-etcd, built and cached by `make test` (or
// `make apiserver`) and found through $KPROXY_APISERVER.
//
//	s := kubetest.Start(t)                      // ready, RBAC from deploy/rbac.yaml applied
//	s.Admin.CoreV1().Services("default").Create(...)   // system:masters
//	cfg, _ := clientcmd.BuildConfigFromFlags("", s.KproxyKubeconfig) // kproxy's identity
//	s.Stop(t); s.Restart(t)                     // same ports, same data
//
// Each Start is its own apiserver (own ports, own data) on 127.0.0.1, ready in a
// few seconds; everything is stopped and removed by t.Cleanup. No
// controller-manager runs: create selectorless Services and write their
// EndpointSlices yourself (label kubernetes.io/service-name), and don't expect
// deleted namespaces to go away (they stay Terminating).
//
// Addresses: Service clusterIPs come from Server.ServiceCIDR, a loopback
// range, so kproxy's bind portal can listen on them without root; but the
// apiserver rejects loopback and link-local addresses as EndpointSlice
// endpoints and as externalIPs: backends listen in a BackendNet namespace instead.
package kubetest
