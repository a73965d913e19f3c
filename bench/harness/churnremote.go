package harness

import (
	"path/filepath"
)

// remotePerFile is the remote churn's services per manifest file: the
// core's file source reads and decodes a changed file whole, so small
// files keep its cost per change small and the figure kproxy's.
const remotePerFile = 10

// remoteChurn is the churn through a core: the manifest files are read by
// `kproxy watch --serve` (the same kproxy binary), and the kproxy under
// test follows it with --source remote:ADDR, so each change reaches it as
// the core's delta over protoactor remoting, no API server doing work per
// change.
type remoteChurn struct {
	*fileChurn
	core *Proc
	addr string
}

func startRemoteChurn(e *env, n int) (*remoteChurn, error) {
	f, err := newFileChurn(e, n, remotePerFile)
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	core, err := startProc("core", filepath.Join(e.dir, "core.log"),
		append([]string{e.o.Kproxy, "watch", "--serve", addr, "--source", "file:" + f.m.dir, "--log-format", "json", "--log-level", "info"}, e.o.CoreArgs...), e.o.KproxyEnv)
	if err != nil {
		return nil, err
	}
	return &remoteChurn{fileChurn: f, core: core, addr: addr}, nil
}

func (r *remoteChurn) Name() string         { return "remote" }
func (r *remoteChurn) KproxyArgs() []string { return []string{"--source", "remote:" + r.addr} }
