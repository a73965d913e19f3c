//go:build linux

package keeper

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Client is kproxy's side: it takes back the sockets a previous kproxy
// left with the keeper, and keeps and drops its own there. It satisfies
// datapath.SocketKeeper.
type Client struct {
	path string
	log  zerolog.Logger
	// resync, when set, keeps every socket again after a reconnection
	// (the keeper restarted, and lost what it held).
	resync func()

	// detached: the process stops without a successor, and the keeper
	// keeps every socket for the next one (Drop does nothing).
	detached atomic.Bool
	// donor: the sockets came from a serving predecessor (DialDonor),
	// which keeps nothing: Keep and Drop do nothing.
	donor bool

	// Connection IDs: this process's nonce and a counter (a container
	// restarted has the same PID).
	nonce string
	seq   atomic.Uint64

	// unconns are connection IDs to drop, sent together (unconnDelay).
	unconnMu    sync.Mutex
	unconns     []string
	unconnBytes int
	unconnTimer *time.Timer

	mu           sync.Mutex
	c            *net.UnixConn
	waiting      map[string]*os.File // listed at Dial, not yet taken
	waitingConns map[string][]Conn   // by their listening socket's key
	waitingFlows map[string][]Flow   // by their listening socket's key
	broken       bool                // the last send failed: warn once
}

// Dial connects to the keeper at path and lists the sockets it holds.
func Dial(path string, log zerolog.Logger) (*Client, error) {
	c, err := dial(path)
	if err != nil {
		return nil, err
	}
	var nonce [6]byte
	rand.Read(nonce[:])
	k := &Client{path: path, log: log, c: c, nonce: hex.EncodeToString(nonce[:]),
		waiting: map[string]*os.File{}, waitingConns: map[string][]Conn{}, waitingFlows: map[string][]Flow{}}
	if _, _, err := c.WriteMsgUnix([]byte(verbList), nil, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("socket keeper %s: %w", path, err)
	}
	buf := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(connFiles*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			k.Close()
			return nil, fmt.Errorf("socket keeper %s: list: %w", path, err)
		}
		fds := rights(oob[:oobn])
		verb, key, _ := strings.Cut(string(buf[:n]), " ")
		if verb == verbEnd {
			return k, nil
		}
		if verb == verbKeptConn && (len(fds) == 1 || len(fds) == connFiles) {
			id, lkey, _ := strings.Cut(key, " ")
			k.waitingConns[lkey] = append(k.waitingConns[lkey], connOf(id, fds))
			continue
		}
		if verb == verbKeptFlow && len(fds) == 1 {
			id, rest, _ := strings.Cut(key, " ")
			lkey, meta, _ := strings.Cut(rest, " ")
			if f, ok := flowOf(id, meta, fds[0]); ok {
				k.waitingFlows[lkey] = append(k.waitingFlows[lkey], f)
				continue
			}
		}
		if verb != verbKept || len(fds) != 1 {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			continue
		}
		k.waiting[key] = os.NewFile(uintptr(fds[0]), key)
	}
}

func dial(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("socket keeper %s: %w", path, err)
	}
	return c, nil
}

// Waiting is how many sockets the keeper held at Dial and were not taken.
func (k *Client) Waiting() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.waiting)
}

// OnReconnect sets what keeps every socket again once the connection to
// the keeper was lost and made anew.
func (k *Client) OnReconnect(resync func()) {
	k.mu.Lock()
	k.resync = resync
	k.mu.Unlock()
}

// Take returns the kept socket for network and address, once, or nil.
func (k *Client) Take(network, address string) *os.File {
	return take(k, k.waiting, network, address)
}

// TakeConns returns the established connections kept with the listening
// socket of network and address, once.
func (k *Client) TakeConns(network, address string) []Conn {
	return take(k, k.waitingConns, network, address)
}

// TakeFlows returns the UDP flows kept with the listening socket of
// network and address, once.
func (k *Client) TakeFlows(network, address string) []Flow {
	return take(k, k.waitingFlows, network, address)
}

// take removes and returns what waiting holds for the listening socket of
// network and address (listed at Dial).
func take[T any](k *Client, waiting map[string]T, network, address string) T {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := Key(network, address)
	v := waiting[key]
	delete(waiting, key)
	return v
}

// newID is the ID of the next connection or flow kept.
func (k *Client) newID() string { return k.nonce + "-" + strconv.FormatUint(k.seq.Add(1), 36) }

// Keep gives the keeper a copy of the socket fd.
func (k *Client) Keep(network, address string, fd uintptr) {
	if k.donor {
		return
	}
	k.send(verbKeep+" "+Key(network, address), int(fd))
}

// Drop makes the keeper close its copy: the socket is being closed for good.
func (k *Client) Drop(network, address string) {
	if k.detached.Load() || k.donor {
		return
	}
	k.send(verbDrop + " " + Key(network, address))
}

// KeepConn gives the keeper a copy of a connection's descriptors, served
// by the listening socket of network and address: the client's socket as
// soon as it is accepted, and once the endpoint is connected, under the
// same id, the client's, the endpoint's and both ends of the two pipes
// its bytes move through (client to endpoint first). It returns the
// connection's ID (a new one when id is ""), or "" when not kept.
func (k *Client) KeepConn(network, address, id string, fds ...int) string {
	// Detached, no new connection is kept (none is accepted), but one
	// dialed meanwhile is: the next process must not dial it again.
	if k.donor || id == "" && k.detached.Load() {
		return ""
	}
	if id == "" {
		id = k.newID()
	}
	if len(fds) != 1 && len(fds) != connFiles {
		return ""
	}
	if !k.send(verbConn+" "+id+" "+Key(network, address), fds...) {
		return ""
	}
	return id
}

// KeepFlow gives the keeper a copy of a UDP flow's socket to its
// endpoint, fd, before the flow's first datagram goes out: the flow is
// client's, on the listening socket of network and address, and reply is
// the control message its answers are sent with. It returns the flow's
// ID, "" when not kept; DropConn drops it.
func (k *Client) KeepFlow(network, address, client string, reply []byte, fd int) string {
	if k.donor || k.detached.Load() {
		return ""
	}
	id := k.newID()
	if !k.send(verbFlow+" "+id+" "+Key(network, address)+" "+flowMeta(client, reply), fd) {
		return ""
	}
	return id
}

// DropConn makes the keeper close its copies of connection id, which
// this process has shut down and closed (detached too: it ended). The IDs
// go together, within unconnDelay: the peers had their FINs from the
// shutdown, and the keeper's copies only hold descriptors until then.
func (k *Client) DropConn(id string) {
	if id == "" || k.donor {
		return
	}
	k.unconnMu.Lock()
	k.unconns = append(k.unconns, id)
	k.unconnBytes += len(id) + 1
	full := len(verbUnconn)+k.unconnBytes > maxMessage-64
	if !full && k.unconnTimer == nil {
		k.unconnTimer = time.AfterFunc(unconnDelay, k.flushUnconns)
	}
	k.unconnMu.Unlock()
	if full {
		k.flushUnconns()
	}
}

// unconnDelay bounds how long a dropped connection's IDs wait to go.
const unconnDelay = 5 * time.Millisecond

// flushUnconns sends the IDs waiting, in messages of at most maxMessage.
func (k *Client) flushUnconns() {
	k.unconnMu.Lock()
	ids := k.unconns
	k.unconns, k.unconnBytes = nil, 0
	if k.unconnTimer != nil {
		k.unconnTimer.Stop()
		k.unconnTimer = nil
	}
	k.unconnMu.Unlock()
	for len(ids) > 0 {
		msg := verbUnconn
		i := 0
		for ; i < len(ids) && len(msg)+1+len(ids[i]) <= maxMessage; i++ {
			msg += " " + ids[i]
		}
		k.send(msg)
		ids = ids[i:]
	}
}

// KeepsConns is true: a keeper holds connections too.
func (k *Client) KeepsConns() bool { return true }

// Detached reports whether Detach was called: the connections are left
// to the keeper, not shut down.
func (k *Client) Detached() bool { return k.detached.Load() }

// Detach leaves every socket with the keeper: from now on closing one
// here does not drop it (the process stops, and no successor serves the
// sockets: the next process, or the keeper's SIGTERM, decides).
func (k *Client) Detach() { k.detached.Store(true) }

// DropRest drops the sockets listed at Dial that were not taken: services
// gone while no kproxy ran.
func (k *Client) DropRest() {
	k.mu.Lock()
	rest := k.waiting
	k.waiting = map[string]*os.File{}
	k.mu.Unlock()
	k.mu.Lock()
	restConns := k.waitingConns
	k.waitingConns = map[string][]Conn{}
	restFlows := k.waitingFlows
	k.waitingFlows = map[string][]Flow{}
	k.mu.Unlock()
	for key, f := range rest {
		network, address, _ := strings.Cut(key, "/")
		k.Drop(network, address)
		f.Close()
	}
	conns := 0
	for _, cs := range restConns {
		for _, c := range cs {
			// Their service port is gone: shut down as kproxy would
			// (the keeper's copies hold the sockets open).
			for _, f := range []*os.File{c.Client, c.Endpoint} {
				if f == nil {
					continue
				}
				if rc, err := f.SyscallConn(); err == nil {
					rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
				}
			}
			c.Close()
			k.DropConn(c.ID)
			conns++
		}
	}
	for _, fs := range restFlows {
		for _, f := range fs {
			f.Endpoint.Close()
			k.DropConn(f.ID)
			conns++
		}
	}
	if len(rest)+conns > 0 {
		k.log.Info().Int("sockets", len(rest)).Int("connections", conns).Msg("socket keeper: sockets of service ports no longer here closed")
	}
}

// Close closes the connection; the keeper keeps what it holds.
func (k *Client) Close() {
	k.flushUnconns()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// send sends one message with the descriptors fds,
// reconnecting once if the keeper went away; false if it could not.
func (k *Client) send(msg string, fds ...int) bool {
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	k.mu.Lock()
	reconnected := false
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if k.c == nil {
			if k.c, err = dial(k.path); err != nil {
				break
			}
			reconnected = true
		}
		if _, _, err = k.c.WriteMsgUnix([]byte(msg), oob, nil); err == nil {
			break
		}
		k.c.Close()
		k.c = nil
	}
	switch {
	case err != nil && !k.broken:
		k.log.Warn().Err(err).Msg("socket keeper unreachable: a kill -9 would refuse connections until the next start")
	case err == nil && k.broken:
		k.log.Info().Msg("socket keeper reachable again")
	}
	k.broken = err != nil
	resync := k.resync
	k.mu.Unlock()
	if reconnected && err == nil && resync != nil {
		resync()
	}
	return err == nil
}
