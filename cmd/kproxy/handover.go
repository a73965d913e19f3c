package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/messages"
)

// How one kproxy process hands over to the next without an outage: its
// sockets are SO_REUSEPORT (the next one binds the same addresses while
// it serves), its kernel rules stay in place when it stops, and its proxy
// ports are written to a file the next one reads, so the rules point at
// sockets the next one opens on the same ports. After a kill -9 the file
// and the rules are there all the same.

// defaultProxyPortsFile lives on tmpfs: after a reboot neither the rules
// nor the ports mean anything. The DaemonSet mounts it from the host.
const defaultProxyPortsFile = "/run/kproxy/proxy-ports.json"

// proxyPortsFile is the file's content.
type proxyPortsFile struct {
	Version int `json:"version"`
	// NodeName is the writer's --node-name: a file another node's kproxy
	// wrote (a host path shared by mistake) holds ports that mean nothing
	// here, and taking them would join this node's sockets of other
	// service ports. Files without it are taken, as before it was written.
	NodeName     string                       `json:"nodeName,omitempty"`
	ServicePorts map[string]actors.ProxyPorts `json:"servicePorts"`
}

// maxProxyPortsBytes bounds the file (10,000 service ports take ~700 KiB).
const maxProxyPortsBytes = 64 << 20

// loadProxyPorts reads the ports a previous process left; a missing file
// is an empty one, a bad one is reported and ignored (new ports are
// allocated and the rules re-programmed, as on a first start).
func loadProxyPorts(path, nodeName string, log zerolog.Logger) map[string]actors.ProxyPorts {
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		log.Warn().Err(err).Str("file", path).Msg("cannot read the previous process's proxy ports; allocating new ones")
		return nil
	case len(raw) > maxProxyPortsBytes:
		log.Warn().Str("file", path).Msg("proxy ports file too large; allocating new ports")
		return nil
	}
	var f proxyPortsFile
	if err := json.Unmarshal(raw, &f); err != nil || f.Version != 1 {
		log.Warn().Err(err).Str("file", path).Int("version", f.Version).Msg("proxy ports file unreadable; allocating new ports")
		return nil
	}
	if f.NodeName != "" && f.NodeName != nodeName {
		log.Warn().Str("file", path).Str("writtenOn", f.NodeName).Str("nodeName", nodeName).
			Msg("proxy ports file written by another node's kproxy (is the host path shared?); allocating new ports")
		return nil
	}
	log.Info().Str("file", path).Int("servicePorts", len(f.ServicePorts)).Msg("taking over the previous process's proxy ports")
	return f.ServicePorts
}

// proxyPortsWriter keeps the file current: every service port's proxy
// ports, written at most every 100 ms, whole or not at all (rename).
type proxyPortsWriter struct {
	path, nodeName string
	log            zerolog.Logger

	mu    sync.Mutex
	ports map[string]actors.ProxyPorts
	dirty chan struct{}
}

func startProxyPortsWriter(ctx context.Context, path, nodeName string, proxy *actors.Proxy, log zerolog.Logger) {
	if path == "" {
		return
	}
	w := &proxyPortsWriter{path: path, nodeName: nodeName, log: log, ports: map[string]actors.ProxyPorts{}, dirty: make(chan struct{}, 1)}
	unsub := proxy.Subscribe(w.observe)
	go func() {
		defer unsub()
		w.run(ctx)
	}()
}

func (w *proxyPortsWriter) observe(st *messages.ServicePortState) {
	id := st.GetKey().ID()
	pp := actors.ProxyPorts{Proxy: int(st.GetProxyPort()), External: int(st.GetExternalProxyPort())}
	w.mu.Lock()
	old, had := w.ports[id]
	switch {
	case st.GetDeleted() || pp.Proxy == 0:
		delete(w.ports, id)
	default:
		w.ports[id] = pp
	}
	now, has := w.ports[id]
	changed := had != has || old != now
	w.mu.Unlock()
	if changed {
		select {
		case w.dirty <- struct{}{}:
		default:
		}
	}
}

// run writes after changes, coalescing those of 100 ms; the last state is
// written before it returns (the process stops).
func (w *proxyPortsWriter) run(ctx context.Context) {
	failed := false
	for {
		select {
		case <-ctx.Done():
			select {
			case <-w.dirty:
				w.write(&failed)
			default:
			}
			return
		case <-w.dirty:
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		w.write(&failed)
	}
}

func (w *proxyPortsWriter) write(failed *bool) {
	w.mu.Lock()
	raw, err := json.Marshal(proxyPortsFile{Version: 1, NodeName: w.nodeName, ServicePorts: w.ports})
	w.mu.Unlock()
	if err == nil {
		err = writeFileAtomic(w.path, raw)
	}
	switch {
	case err != nil && !*failed:
		w.log.Warn().Err(err).Str("file", w.path).Msg("cannot record proxy ports; a restart will allocate new ones")
	case err == nil && *failed:
		w.log.Info().Str("file", w.path).Msg("proxy ports recorded again")
	}
	*failed = err != nil
}

// writeFileAtomic writes raw to path through a temporary file and rename,
// so a reader (or a kill -9) never sees half a file.
func writeFileAtomic(path string, raw []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".proxy-ports-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("record proxy ports: %w", err)
	}
	return nil
}
