// Package netsh is winuserspace's portal mode (Windows): service IPs are
// added to an interface with netsh so that the listeners bind them
// directly. See Rules; testdata/ holds the commands it runs as golden text.
package netsh
