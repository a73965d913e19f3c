package main

import (
	"os"
	"testing"
)

// asKproxyEnv makes this test binary be kproxy: the bench smoke test runs
// it as the kproxy under test, a separate process, as `kproxy bench` runs
// its own binary.
const asKproxyEnv = "KPROXY_TEST_BINARY_IS_KPROXY"

func TestMain(m *testing.M) {
	if os.Getenv(asKproxyEnv) == "1" {
		os.Exit(kproxyMain(os.Args[1:], os.Stdout))
	}
	if os.Getenv(asSlowWriterEnv) == "1" {
		os.Exit(slowWriterMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}
