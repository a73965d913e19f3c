package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// defaultAdminTokenFile is where `kproxy run` writes its admin API token
// and `kproxy chaos` reads it: one file per admin address, so two kproxy
// processes on a host do not mix theirs up. It lives in the user's
// runtime directory (readable by the user only).
func defaultAdminTokenFile(addr string) string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("kproxy-%d", os.Getuid()))
	}
	name := strings.NewReplacer(":", "_", "[", "", "]", "").Replace(addr)
	return filepath.Join(dir, "kproxy", "admin-token-"+name)
}

// writeAdminToken makes a fresh random token and writes it to path (mode
// 0600, its directory 0700), whole or not at all.
func writeAdminToken(path string) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	token := hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin-token-*")
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(token + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("admin token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return token, nil
}

// readAdminToken reads the token kproxy run wrote.
func readAdminToken(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w (is kproxy running with --enable-fault-injection, and the same --admin-address / --admin-token-file?)", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", errors.New("admin token: " + path + " is empty")
	}
	return token, nil
}
