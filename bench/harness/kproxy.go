package harness

import (
	"path/filepath"
)

// kproxyBinary is one kproxy under test: the build being measured, or the
// baseline it is compared with, each serving its services on its own /16
// so the two never share an address.
type kproxyBinary struct {
	name string // its target: kproxy or baseline
	bin  string
	net  byte // its service IPs' /16
}

// current is the kproxy being measured.
func (o *Options) current() kproxyBinary {
	return kproxyBinary{name: TargetKproxy, bin: o.Kproxy, net: kproxyNet}
}

// kproxies are the kproxy binaries a scenario that compares builds runs:
// the current one, and the baseline when it is compared.
func (o *Options) kproxies() []kproxyBinary {
	out := []kproxyBinary{o.current()}
	if o.compares(TargetBaseline) {
		out = append(out, kproxyBinary{name: TargetBaseline, bin: o.Baseline, net: baselineNet})
	}
	return out
}

// target is k running as p, on its first n service addresses of a mode.
func (k kproxyBinary) target(p *Proc, n int, mode string) target {
	return target{name: k.name, proc: p, addrs: serviceAddrs(k.net, n, mode)}
}

// startKproxy runs k on the manifests in src (a directory) with the bind
// portal on loopback. The admin API (fault injection) is on only when
// asked, since it adds a check to every dial.
func startKproxy(o *Options, k kproxyBinary, dir, src string, faults bool) (*Proc, *admin, error) {
	return startKproxySource(o, k, dir, []string{"--source", "file:" + src}, faults)
}

// startKproxySource runs k with other source flags; its log and proxy
// ports file in dir are named for k.
func startKproxySource(o *Options, k kproxyBinary, dir string, source []string, faults bool) (*Proc, *admin, error) {
	metricsAddr, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	args := append([]string{k.bin, "run"}, source...)
	args = append(args, "--portal", "bind", "--bind-address", "127.0.0.1",
		"--node-name", "bench", "--healthz-bind-address", "", "--metrics-bind-address", metricsAddr,
		"--log-format", "json", "--log-level", "warn",
		// Its own proxy ports, not the node's default file another kproxy may use.
		"--proxy-ports-file", filepath.Join(dir, k.name+"-proxy-ports.json"))
	var a *admin
	if faults {
		adminAddr, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		token := filepath.Join(dir, k.name+"-admin-token")
		args = append(args, "--enable-fault-injection", "--admin-address", adminAddr, "--admin-token-file", token)
		a = newAdmin(adminAddr, token)
	}
	args = append(args, o.KproxyArgs...)
	p, err := startProc(k.name, filepath.Join(dir, k.name+".log"), args, o.KproxyEnv)
	if err != nil {
		return nil, nil, err
	}
	p.Metrics = metricsAddr
	return p, a, nil
}
