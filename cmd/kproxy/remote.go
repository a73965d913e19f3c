package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/remote"
)

// remoteFlags configure protoactor remoting between a core (kproxy watch
// --serve) and its backends (--source remote:ADDR).
type remoteFlags struct {
	listen           string
	advertise        string
	tokenFile        string
	tlsCert, tlsKey  string
	tlsCA            string
	allowNonLoopback bool
}

func (f *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "remote-listen", "127.0.0.1:0", "with --source remote:ADDR: host:port this backend's remoting listens on (the core dials it back to deliver the view); loopback unless --remote-allow-non-loopback")
	fs.StringVar(&f.advertise, "remote-advertise", "", "the host:port peers dial to reach this process's remoting (default: the address it listens on)")
	fs.StringVar(&f.tokenFile, "remote-token-file", "", "a file holding the shared token the core and its backends must present on every remoting connection (required off loopback)")
	fs.StringVar(&f.tlsCert, "remote-tls-cert", "", "PEM certificate for remoting over TLS (served and presented as a client certificate)")
	fs.StringVar(&f.tlsKey, "remote-tls-key", "", "PEM key of --remote-tls-cert")
	fs.StringVar(&f.tlsCA, "remote-tls-ca", "", "PEM CA bundle that peers' certificates must chain to (client certificates are required)")
	fs.BoolVar(&f.allowNonLoopback, "remote-allow-non-loopback", false, "allow remoting to listen on a non-loopback address (with a token)")
}

// checkListen refuses a non-loopback remoting address unless allowed, and
// then only with a token.
func (f *remoteFlags) checkListen(flagName, addr string) error {
	loopback, err := loopbackAddress(flagName, addr)
	if err != nil || loopback {
		return err
	}
	if host, _, _ := net.SplitHostPort(addr); net.ParseIP(host) == nil {
		return fmt.Errorf("%s %q: the host must be an IP address", flagName, addr)
	}
	if !f.allowNonLoopback {
		return fmt.Errorf("%s %q is not loopback: pass --remote-allow-non-loopback (and --remote-token-file) to serve remoting beyond this host", flagName, addr)
	}
	if f.tokenFile == "" {
		return fmt.Errorf("%s %q is not loopback: --remote-token-file is required", flagName, addr)
	}
	return nil
}

func (f *remoteFlags) validate() error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return errors.New("--remote-tls-cert and --remote-tls-key go together")
	}
	if f.tlsCA != "" && f.tlsCert == "" {
		return errors.New("--remote-tls-ca needs --remote-tls-cert and --remote-tls-key")
	}
	return nil
}

// config reads the token and certificates.
func (f *remoteFlags) config(listen string, log zerolog.Logger) (remote.Config, error) {
	rc := remote.Config{Listen: listen, Advertise: f.advertise, Log: log}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return rc, fmt.Errorf("--remote-token-file: %w", err)
		}
		rc.Token = strings.TrimSpace(string(b))
		if rc.Token == "" {
			return rc, fmt.Errorf("--remote-token-file %s is empty", f.tokenFile)
		}
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return rc, fmt.Errorf("--remote-tls-cert/--remote-tls-key: %w", err)
		}
		rc.ServerTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		rc.ClientTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return rc, fmt.Errorf("--remote-tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return rc, fmt.Errorf("--remote-tls-ca %s: no PEM certificate", f.tlsCA)
			}
			rc.ServerTLS.ClientCAs, rc.ServerTLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
			rc.ClientTLS.RootCAs = pool
		}
	}
	return rc, nil
}
