package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRemoteTokenRefusesWrongBackend: a core with a token; a node proxy
// with another token, and one with none, are refused on the connection
// itself with a clear error on both sides (the node exits with it, the
// core logs the peer), and a node with the token is served.
func TestRemoteTokenRefusesWrongBackend(t *testing.T) {
	port := backendsOn(t, "127.0.0.11")
	dir := t.TempDir()
	manifest := filepath.Join(dir, "services.yaml")
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port, [][2]string{{"127.0.0.11", "node-a"}}))
	good, bad := filepath.Join(dir, "token"), filepath.Join(dir, "wrong")
	os.WriteFile(good, []byte("s3cret-token\n"), 0o600)
	os.WriteFile(bad, []byte("not-the-token\n"), 0o600)
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest, "--remote-token-file", good)...)
	core.waitLog(t, "core serving", 1, 30*time.Second)

	for i, extra := range [][]string{{"--remote-token-file", bad}, nil} {
		node := startProc(t, fmt.Sprintf("node-refused-%d", i), nodeArgs(coreAddr, "node-a", freeTCPPort(t), extra...)...)
		if err := node.wait(t, 30*time.Second); err == nil {
			t.Fatalf("a node with %v exited 0", extra)
		}
		logs := node.logs.String()
		if !strings.Contains(logs, "core refused this backend") || !strings.Contains(logs, "missing or wrong token") {
			t.Fatalf("node with %v: no clear error:\n%s", extra, logs)
		}
		core.waitLog(t, "remote peer refused: missing or wrong token", i+1, 10*time.Second)
	}
	if strings.Contains(core.logs.String(), "backend subscribed") {
		t.Fatal("the core served a refused backend")
	}

	pa := freeTCPPort(t)
	node := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa, "--remote-token-file", good)...)
	node.waitLog(t, "source synced", 1, 30*time.Second)
	awaitNames(t, nodeAddr(pa), 5, "127.0.0.11")
}

// TestRemoteTLSClientCertificates: remoting over TLS with client
// certificates; a node whose certificate another CA signed is refused
// with a clear error on both sides, as is one asking for another node's
// view than its certificate names; node-a's certificate gets node-a's.
func TestRemoteTLSClientCertificates(t *testing.T) {
	port := backendsOn(t, "127.0.0.11")
	dir := t.TempDir()
	manifest := filepath.Join(dir, "services.yaml")
	replaceFile(t, manifest, localService("local", "127.0.0.60", 8080, port, [][2]string{{"127.0.0.11", "node-a"}}))
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret-token"), 0o600)
	ca, caKey := newCA(t, dir, "ca")
	other, otherKey := newCA(t, dir, "other-ca")
	tlsFlags := func(name string, ca *x509.Certificate, key *ecdsa.PrivateKey, caFile string) []string {
		cert, keyFile := newLeaf(t, dir, name, ca, key)
		return []string{"--remote-tls-cert", cert, "--remote-tls-key", keyFile, "--remote-tls-ca", caFile, "--remote-token-file", token}
	}
	coreAddr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	core := startProc(t, "core", coreArgs(coreAddr, manifest, tlsFlags("core", ca, caKey, filepath.Join(dir, "ca.pem"))...)...)
	core.waitLog(t, `"tls":true`, 1, 30*time.Second)

	// Signed by another CA (and trusting only it): refused both ways.
	rogue := startProc(t, "node-rogue", nodeArgs(coreAddr, "node-a", freeTCPPort(t), tlsFlags("rogue", other, otherKey, filepath.Join(dir, "other-ca.pem"))...)...)
	if err := rogue.wait(t, 30*time.Second); err == nil {
		t.Fatal("a node with a foreign certificate exited 0")
	}
	if logs := rogue.logs.String(); !strings.Contains(logs, "core refused this backend") || !strings.Contains(logs, "TLS") {
		t.Fatalf("rogue node: no clear error:\n%s", logs)
	}
	core.waitLog(t, "remote peer refused: TLS handshake failed", 1, 10*time.Second)

	// A certificate of the right CA for node-b asking for node-a's view:
	// refused, a backend gets only the view of the node its certificate names.
	impostor := startProc(t, "node-impostor", nodeArgs(coreAddr, "node-a", freeTCPPort(t), tlsFlags("node-b", ca, caKey, filepath.Join(dir, "ca.pem"))...)...)
	if err := impostor.wait(t, 30*time.Second); err == nil {
		t.Fatal("node-b's certificate subscribed as node-a")
	}
	if logs := impostor.logs.String(); !strings.Contains(logs, "the core refused the subscription") || !strings.Contains(logs, `client certificate for \"node-b\"`) {
		t.Fatalf("impostor: no clear error:\n%s", logs)
	}
	core.waitLog(t, "subscription refused", 1, 10*time.Second)

	pa := freeTCPPort(t)
	node := startProc(t, "node-a", nodeArgs(coreAddr, "node-a", pa, tlsFlags("node-a", ca, caKey, filepath.Join(dir, "ca.pem"))...)...)
	node.waitLog(t, "source synced", 1, 30*time.Second)
	awaitNames(t, nodeAddr(pa), 5, "127.0.0.11")
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newCA makes a CA and writes it as dir/name.pem.
func newCA(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

// newLeaf makes a certificate for 127.0.0.1, server and client, signed by ca.
func newLeaf(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	kd, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, keyFile, "EC PRIVATE KEY", kd)
	return certFile, keyFile
}
