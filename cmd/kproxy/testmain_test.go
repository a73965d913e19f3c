package main

import (
	"os"
	"testing"
)

// asKproxyEnv makes this test binary be kproxy: tests run it as a
// separate kproxy process.
const asKproxyEnv = "KPROXY_TEST_BINARY_IS_KPROXY"

// asKproxyMainEnv makes this test binary run kproxy's main, which may
// execute the binary again (reexecWithSysmonSetting).
const asKproxyMainEnv = "KPROXY_TEST_BINARY_RUNS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asKproxyEnv) == "1" {
		os.Exit(kproxyMain(os.Args[1:], os.Stdout))
	}
	if os.Getenv(asKproxyMainEnv) == "1" {
		main()
	}
	if os.Getenv(asSlowWriterEnv) == "1" {
		os.Exit(slowWriterMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}
