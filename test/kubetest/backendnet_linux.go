package kubetest

import (
	"testing"

	"github.com/kproxy/kproxy/test/netnstest"
)

// BackendNet is where backends of Kubernetes-source tests listen: the
// apiserver rejects loopback EndpointSlice addresses, and tests may send
// traffic only to loopback or to namespaces they create. It is a
// netnstest.HostNet, a namespace joined to the test's own by a veth pair:
// AddIP gives it an address the test process reaches, Do and Listen run
// code and listeners inside it.
type BackendNet = netnstest.HostNet

// NewBackendNet creates the namespace and veth pair, removed at cleanup.
// The test is skipped when namespaces cannot be created (not root).
func NewBackendNet(t testing.TB) *BackendNet {
	t.Helper()
	return netnstest.NewHostNet(t, "kubebackend")
}
