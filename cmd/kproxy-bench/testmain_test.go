package main

import (
	"os"
	"testing"
)

// asBenchEnv makes this test binary be kproxy-bench: the harness runs its
// own binary's `relay FILE` as the UDP relay process.
const asBenchEnv = "KPROXY_TEST_BINARY_IS_KPROXY_BENCH"

func TestMain(m *testing.M) {
	if os.Getenv(asBenchEnv) == "1" {
		os.Exit(benchMain(os.Args[1:], os.Stdout))
	}
	os.Exit(m.Run())
}
