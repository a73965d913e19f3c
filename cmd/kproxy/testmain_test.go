package main

import (
	"os"
	"testing"
)

// asKproxyEnv makes this test binary be kproxy: tests run it as a
// separate kproxy process.
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
