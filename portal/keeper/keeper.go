// Package keeper holds copies of kproxy's listening sockets in a process
// of their own, so that they stay open when kproxy dies: a listening
// socket is closed only when its last descriptor is, and while the keeper
// holds one, the kernel goes on completing connections into its backlog
// and queueing datagrams, where kube-proxy's rules send them. The next
// kproxy (the kubelet restarts the container) takes the same sockets from
// the keeper and serves what queued: a kill -9 or an OOM kill refuses no
// connection, as systemd's file descriptor store keeps a service's sockets
// across its restarts.
//
// The keeper runs beside kproxy in the same pod (kproxy keep-sockets), and
// they talk over a unix SOCK_SEQPACKET socket in the pod's own volume:
// "keep KEY" with the socket's descriptor (SCM_RIGHTS), "drop KEY", and
// "list", answered by a "kept KEY" message with each descriptor and "end".
// A KEY is "network/address" (tcp/0.0.0.0:34327).
//
// It holds TCP connections too: "conn ID KEY" with the client's socket
// as soon as kproxy accepted it; again, once the endpoint is connected,
// with the client's socket, the endpoint's and the two pipes (both ends
// of each) through which kproxy moves every byte of the connection; and
// "unconn ID" when kproxy has closed them (its own shutdown sent the
// FINs, or its reset set SO_LINGER: the keeper's close is the last).
// Every byte is always in a socket or in a pipe the keeper holds, so a
// connection taken over after a kill goes on exactly where it was. Listed as "keptconn ID KEY", they go to
// the next kproxy with their listening socket, which moves their bytes on:
// a killed kproxy breaks no connection either, only the bytes it had read
// and not yet written (microseconds of a connection's life) are lost.
//
// And UDP flows: "flow ID KEY CLIENT REPLY" with the flow's socket to its
// endpoint, before the flow's first datagram goes out; CLIENT is the
// client's address, REPLY the control message (hex, "-" for none) that
// sends answers from the address the client sent to. Dropped with
// "unconn ID" as connections are, and listed as "keptflow ID KEY CLIENT
// REPLY": an answer on its way when kproxy died (a DNS server's) queues
// in the kept socket, and the next kproxy sends it on to the client.
//
// kproxy drops a socket before it closes it for good (a service deleted,
// or SIGTERM: the next process's sockets share the address and take the
// queue), so the keeper never holds a socket nobody serves but for the
// time between a crash and the next start. A keeper that sees no kproxy
// for Options.Hold closes every socket (kproxy is not coming back, and
// refused is better than queued forever); on SIGTERM (its pod is deleted)
// it closes them at once.
package keeper

import (
	"encoding/hex"
	"errors"
	"os"
	"strings"
)

// Message verbs.
const (
	verbKeep = "keep"
	verbDrop = "drop"
	verbList = "list"
	verbKept = "kept"
	verbEnd  = "end"

	verbConn     = "conn"
	verbUnconn   = "unconn"
	verbKeptConn = "keptconn"

	verbFlow     = "flow"
	verbKeptFlow = "keptflow"
)

// maxMessage bounds a message: a verb, a key (an address is short).
const maxMessage = 512

// ErrUnsupported is returned where unix descriptor passing is not (not Linux).
var ErrUnsupported = errors.New("socket keeper: only on Linux")

// Conn is a connection the keeper held: the client's socket and, when
// its endpoint was connected, the endpoint's (else nil) and the pipes
// its bytes move through: read and write ends, client to endpoint first.
type Conn struct {
	ID               string
	Client, Endpoint *os.File
	Pipes            []*os.File
}

// connFiles is how many descriptors a connected connection has.
const connFiles = 6

// Close closes this process's copies.
func (c Conn) Close() {
	for _, f := range c.files() {
		f.Close()
	}
}

func (c Conn) files() []*os.File {
	if c.Endpoint == nil {
		return []*os.File{c.Client}
	}
	return append([]*os.File{c.Client, c.Endpoint}, c.Pipes...)
}

// connOf makes a Conn of the descriptors received with it (1 or connFiles).
func connOf(id string, fds []int) Conn {
	c := Conn{ID: id, Client: os.NewFile(uintptr(fds[0]), id)}
	if len(fds) == connFiles {
		c.Endpoint = os.NewFile(uintptr(fds[1]), id)
		for _, fd := range fds[2:] {
			c.Pipes = append(c.Pipes, os.NewFile(uintptr(fd), id))
		}
	}
	return c
}

// Flow is a UDP flow the keeper held: its socket to the endpoint, the
// client's address ("ip:port") and the control message that sends the
// client's answers from the address it sent to (nil: none needed).
type Flow struct {
	ID, Client string
	Reply      []byte
	Endpoint   *os.File
}

// flowMeta is how a flow's client and reply travel: "CLIENT REPLY".
func flowMeta(client string, reply []byte) string {
	r := "-"
	if len(reply) > 0 {
		r = hex.EncodeToString(reply)
	}
	return client + " " + r
}

// flowOf makes a Flow of a "keptflow" message's ID and meta and its
// descriptor; false when the meta does not parse.
func flowOf(id, meta string, fd int) (Flow, bool) {
	client, r, ok := strings.Cut(meta, " ")
	if !ok || client == "" || strings.Contains(r, " ") {
		return Flow{}, false
	}
	var reply []byte
	if r != "-" {
		var err error
		if reply, err = hex.DecodeString(r); err != nil {
			return Flow{}, false
		}
	}
	return Flow{ID: id, Client: client, Reply: reply, Endpoint: os.NewFile(uintptr(fd), id)}, true
}

// Key names a socket.
func Key(network, address string) string { return network + "/" + address }
