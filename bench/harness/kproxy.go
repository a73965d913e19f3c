package harness

import (
	"path/filepath"
)

// startKproxy runs the kproxy under test on the manifests in src (a
// directory) with the bind portal on loopback. The admin API (fault
// injection) is on only when asked, since it adds a check to every dial.
func startKproxy(o *Options, dir, src string, faults bool) (*Proc, *admin, error) {
	return startKproxySource(o, dir, []string{"--source", "file:" + src}, faults)
}

// startKproxySource runs it with other source flags.
func startKproxySource(o *Options, dir string, source []string, faults bool) (*Proc, *admin, error) {
	metricsAddr, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	args := append([]string{o.Kproxy, "run"}, source...)
	args = append(args, "--portal", "bind", "--bind-address", "127.0.0.1",
		"--node-name", "bench", "--healthz-bind-address", "", "--metrics-bind-address", metricsAddr,
		"--log-format", "json", "--log-level", "warn")
	var a *admin
	if faults {
		adminAddr, err := freePort()
		if err != nil {
			return nil, nil, err
		}
		token := filepath.Join(dir, "admin-token")
		args = append(args, "--enable-fault-injection", "--admin-address", adminAddr, "--admin-token-file", token)
		a = newAdmin(adminAddr, token)
	}
	args = append(args, o.KproxyArgs...)
	p, err := startProc("kproxy", filepath.Join(dir, "kproxy.log"), args, o.KproxyEnv)
	if err != nil {
		return nil, nil, err
	}
	p.Metrics = metricsAddr
	return p, a, nil
}
