package harness

import (
	"context"
	"path/filepath"
	"sync"
)

// ChurnSource holds the churn scenario's services (one TCP port each, one
// endpoint) and changes their endpoints: manifest files by default, a
// real API server in a test.
type ChurnSource interface {
	Name() string
	// KproxyArgs are `kproxy run`'s flags that read this source.
	KproxyArgs() []string
	// Addrs are the services' TCP addresses.
	Addrs() []string
	// Pool is the endpoint IPs: a backend listens on each, on the
	// services' target port, and answers with its IP as its name. Service
	// i starts with Pool()[i%len(Pool())].
	Pool() []string
	// Set makes endpoint service i's only endpoint. It is called
	// concurrently, for different services.
	Set(ctx context.Context, i int, endpoint string) error
}

// fileChurn is the file source: a directory of manifests, perFile
// services to a file, so a change rewrites one small file.
type fileChurn struct {
	mu    sync.Mutex // Set is called concurrently; files are written one at a time
	m     *manifests
	pool  []string
	addrs []string
}

func newFileChurn(e *env, n, perFile int) (*fileChurn, error) {
	b := e.backends
	f := &fileChurn{pool: b.IPs, addrs: serviceAddrs(kproxyNet, n, ModeConn),
		m: &manifests{dir: filepath.Join(e.dir, "manifests"), perFile: perFile, tcpPort: b.TCPPort, udpPort: b.UDPPort, sinkPort: b.SinkPort}}
	for i := range n {
		f.m.services = append(f.m.services, service{IP: hostIP(kproxyNet, i), TCP: true, Endpoints: []string{f.pool[i%len(f.pool)]}})
	}
	return f, f.m.writeAll()
}

func (f *fileChurn) Name() string         { return "file" }
func (f *fileChurn) KproxyArgs() []string { return []string{"--source", "file:" + f.m.dir} }
func (f *fileChurn) Addrs() []string      { return f.addrs }
func (f *fileChurn) Pool() []string       { return f.pool }

func (f *fileChurn) Set(_ context.Context, i int, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.set(i, []string{endpoint})
}
