// Package browsertest drives a headless Chromium (Debian's chromium package)
// for tests of the pages kproxy and kproxy-bench make: New starts one
// browser per test with a fresh profile in the test's temporary directory,
// and its methods navigate, wait for a selector or a JavaScript condition,
// evaluate JavaScript, click, type and take screenshots, each failing the
// test (not hanging it) when the page does not do what it should.
//
// The browser reaches only loopback and files: every other host goes to a
// proxy that does not exist (which resolves no name), so a page that needs
// the internet fails in the test as it would on an air-gapped node. Offline
// cuts loopback too, for pages opened from disk. Requests lists what the page
// asked for and Problems what it threw or logged as an error.
//
// A test calling New is skipped, with the reason, where chromium is not
// installed; `make test-deps` installs it (as root). It is code for tests only.
package browsertest
