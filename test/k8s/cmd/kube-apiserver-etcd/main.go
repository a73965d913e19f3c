// Command kube-apiserver-etcd runs a real kube-apiserver and an embedded etcd in
// one process, on loopback only, for kproxy's tests (see test/kubetest).
//
//	kube-apiserver-etcd --data-dir DIR --secure-port P --token-auth-file FILE \
//	    [--etcd-client-port C] [--etcd-peer-port Q] [-- extra kube-apiserver flags]
//
// Everything it keeps lives under --data-dir, so running it again with the same
// directory and ports is a restart that keeps every object:
//
//	DIR/etcd        etcd's data
//	DIR/certs       the apiserver's self-signed serving certificate (apiserver.crt,
//	                apiserver.key), made by kube-apiserver's --cert-dir on first start
//	DIR/sa.key      service-account signing key (RSA, made here if missing)
//	DIR/sa.pub      its public key
//
// No controller-manager runs: nothing creates EndpointSlices, finalizes deleted
// namespaces or garbage-collects. SIGTERM or SIGINT shuts the apiserver down
// gracefully, then etcd; the exit code is 0 on a clean shutdown.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
	_ "time/tzdata" // as upstream's kube-apiserver main

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as upstream's kube-apiserver main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // as upstream's kube-apiserver main
	_ "k8s.io/component-base/metrics/prometheus/version"  // as upstream's kube-apiserver main
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("kube-apiserver-etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "directory for etcd data, serving certs and service-account keys (required; kept across restarts)")
	securePort := fs.Int("secure-port", 0, "kube-apiserver HTTPS port on 127.0.0.1 (required)")
	tokenFile := fs.String("token-auth-file", "", "kube-apiserver static token file: token,user,uid,\"group1,group2\" (required)")
	clientPort := fs.Int("etcd-client-port", 0, "etcd client port on 127.0.0.1 (0: any free port)")
	peerPort := fs.Int("etcd-peer-port", 0, "etcd peer port on 127.0.0.1 (0: any free port)")
	serviceCIDR := fs.String("service-cluster-ip-range", "198.18.0.0/16", "kube-apiserver --service-cluster-ip-range")
	noFsync := fs.Bool("etcd-unsafe-no-fsync", true, "skip etcd fsyncs (data survives a killed process, not a machine crash)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s --data-dir DIR --secure-port P --token-auth-file FILE [flags] [-- kube-apiserver flags]\n", os.Args[0])
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *dataDir == "" || *securePort == 0 || *tokenFile == "" {
		fs.Usage()
		return 2
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "kube-apiserver-etcd: "+format+"\n", args...)
	}

	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logf("%v", err)
		return 1
	}
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := ensureServiceAccountKey(saKey, saPub); err != nil {
		logf("service-account key: %v", err)
		return 1
	}
	for _, p := range []*int{clientPort, peerPort} {
		if *p == 0 {
			if *p, err = freePort(); err != nil {
				logf("%v", err)
				return 1
			}
		}
	}

	// The command installs kube-apiserver's SIGTERM/SIGINT handler (it may be
	// installed only once per process); its context also ends the wait for etcd.
	cmd := app.NewAPIServerCommand()
	ctx := cmd.Context()

	etcd, err := startEtcd(ctx, filepath.Join(dir, "etcd"), *clientPort, *peerPort, *noFsync)
	if err != nil {
		logf("etcd: %v", err)
		return 1
	}
	defer func() {
		etcd.Close()
		logf("etcd stopped")
	}()
	logf("etcd ready on 127.0.0.1:%d", *clientPort)

	args := []string{
		"--etcd-servers=http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(*clientPort)),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(*securePort),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=" + *serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--token-auth-file=" + *tokenFile,
		"--authorization-mode=RBAC",
		// Fewer moving parts, faster to ready; no client here needs fairness.
		"--enable-priority-and-fairness=false",
		// The "kubernetes" Service's endpoints would be 127.0.0.1, which
		// validation rejects: leave them out instead of logging retries.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	args = append(args, fs.Args()...) // after "--": later flags win
	cmd.SetArgs(args)
	code := cli.Run(cmd)
	logf("kube-apiserver exited with code %d", code)
	return code
}

func startEtcd(ctx context.Context, dir string, clientPort, peerPort int, noFsync bool) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "kube-apiserver-etcd"
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	// One member: it cannot lose an election, so short ticks only make it ready sooner.
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.UnsafeNoFsync = noFsync
	// NewConfig leaves this at 0, which logs every request as "expensive".
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-ctx.Done():
		e.Close()
		return nil, errors.New("interrupted while starting")
	case <-time.After(2 * time.Minute):
		e.Close()
		return nil, errors.New("not ready after 2m")
	}
}

// ensureServiceAccountKey writes an RSA key pair unless keyPath already exists.
func ensureServiceAccountKey(keyPath, pubPath string) error {
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err == nil {
			return nil
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	return writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
