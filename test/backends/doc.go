// Package backends runs real TCP and UDP endpoints on loopback for tests,
// benchmarks and the demo. Each backend says who it is, so a client can see
// which endpoint the proxy chose.
package backends
