// Package binarytest is the harness shared by the tests that run the kproxy
// binary as a separate process (test/e2e, test/conformance):
// building it into the test's temporary directory, starting it with its
// output in a log file that cleanup kills and, when the test failed, shows
// the end of, and reading its admin API's GET /state.
//
// It knows nothing of flags, namespaces or topologies: the caller builds
// the command (in a namespace or not) and hands over the HTTP client that
// reaches the admin API. It is code for tests only.
package binarytest
