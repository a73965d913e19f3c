//go:build !linux

package kubetest

import (
	"net"
	"net/netip"
	"testing"
)

// BackendNet needs Linux network namespaces.
type BackendNet struct{}

// NewBackendNet skips the test off Linux.
func NewBackendNet(t testing.TB) *BackendNet {
	t.Skip("kubetest: backend namespaces need Linux")
	return nil
}

func (b *BackendNet) AddIP(t testing.TB) netip.Addr                          { return netip.Addr{} }
func (b *BackendNet) Do(fn func() error) error                               { return fn() }
func (b *BackendNet) Listen(t testing.TB, network, addr string) net.Listener { return nil }
