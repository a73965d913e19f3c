// Command demo-backends runs the demo endpoints of `make run` on loopback:
// HTTP servers that answer with their own address, and UDP servers that
// echo with their address in front, so you can watch kproxy rotate
// requests across them.
package main
