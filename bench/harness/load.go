package harness

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Load modes.
const (
	ModeKeepAlive = "keepalive" // requests over a connection, PerConn of them, then the next port
	ModeConn      = "conn"      // a new TCP connection per request
	ModeClose     = "close"     // a new connection per HTTP/1.1 request; the server closes first
	ModeUDP       = "udp"       // one datagram and its echo per request
	ModeBulk      = "bulk"      // one connection per client to a sink; a request is bulkOp bytes written
)

// bulkOp is one bulk "request": 1 MiB, in 256 KiB writes.
const bulkOp = 1 << 20

// requestTimeout bounds one TCP request, udpTimeout one datagram's echo:
// a request that takes longer is an error (a lost datagram).
const (
	requestTimeout = 5 * time.Second
	udpTimeout     = time.Second
)

// maxUDPBurst bounds a udp client's burst: 64-byte datagrams cost about
// 1 KiB each of a receiving socket's buffer on loopback, and every
// client's bursts meet in the backends' sockets (4 MiB, below).
const maxUDPBurst = 256

// loadSpec is one bounded run of client load.
type loadSpec struct {
	Mode     string
	Addrs    []string
	Clients  int
	Duration time.Duration
	MaxOps   int64 // stops at this many requests even before Duration
	Size     int   // request (and echo) bytes
	PerConn  int   // keepalive and bulk: requests per connection
	Burst    int   // udp: datagrams sent before their echoes are read
	// GSO: a burst goes in UDP_SEGMENT sends, as QUIC stacks send.
	GSO  bool
	Rate float64
	Live *live // counts as it goes, for the timeline and the progress bar
	// Enter, when set, moves each client's goroutine (locked to its OS
	// thread for good) where its sockets are to be opened: a network
	// namespace.
	Enter func() error
}

// loadResult is what a load saw.
type loadResult struct {
	Ops, Errors int64
	Elapsed     time.Duration
	Hist        *hdrhistogram.Histogram // request latency in µs
	OK, Failed  []int64                 // per address
	ErrSamples  []string
}

// newHist records 1 µs to 60 s with 3 significant digits.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

// runLoad runs spec.Clients clients until Duration, MaxOps or ctx ends.
// Client c owns addresses c, c+C, c+2C, ... (or c mod N when there are
// more clients than addresses), so every address gets its share and each
// proxy sees one flow per UDP client and service port. MaxOps is split
// between the clients, so a client the scheduler starts late still does
// its share.
func runLoad(ctx context.Context, spec loadSpec) (*loadResult, error) {
	if len(spec.Addrs) == 0 || spec.Clients <= 0 {
		return nil, errors.New("load: no addresses or no clients")
	}
	if spec.Live == nil {
		spec.Live = &live{}
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Duration)
	defer cancel()
	res := &loadResult{Hist: newHist(), OK: make([]int64, len(spec.Addrs)), Failed: make([]int64, len(spec.Addrs))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for c := range spec.Clients {
		var own []int
		for i := c; i < len(spec.Addrs); i += spec.Clients {
			own = append(own, i)
		}
		if len(own) == 0 {
			own = []int{c % len(spec.Addrs)}
		}
		var budget int64 // 0: no bound
		if spec.MaxOps > 0 {
			budget = spec.MaxOps / int64(spec.Clients)
			if int64(c) < spec.MaxOps%int64(spec.Clients) {
				budget++
			}
			if budget == 0 {
				continue // fewer requests than clients
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &client{spec: &spec, own: own, hist: newHist(), ok: map[int]int64{}, failed: map[int]int64{}}
			if err := cl.enter(); err != nil {
				cl.fail(own[0], err)
			} else {
				cl.run(ctx, budget, start)
			}
			mu.Lock()
			defer mu.Unlock()
			res.Hist.Merge(cl.hist)
			for i, n := range cl.ok {
				res.OK[i] += n
				res.Ops += n
			}
			for i, n := range cl.failed {
				res.Failed[i] += n
				res.Errors += n
			}
			for _, e := range cl.errs {
				if len(res.ErrSamples) < 10 {
					res.ErrSamples = append(res.ErrSamples, e)
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, nil
}

// client is one load goroutine's state.
type client struct {
	spec       *loadSpec
	own        []int
	hist       *hdrhistogram.Histogram
	ok, failed map[int]int64
	errs       []string

	conn    net.Conn // keepalive: the open connection, to own[cur]
	rd      *bufio.Reader
	cur     int
	used    int
	udp     *net.UDPConn
	udpTo   []netip.AddrPort
	seq     uint64
	seen    []bool // udp burst: which echoes came back
	gsoBuf  []byte // udp burst with --udp-gso: the datagrams of one send
	bursts  int
	payload []byte
	buf     []byte
	bulk    []byte
}

// enter runs spec.Enter, if set, on the client's goroutine, locked to its
// thread for good (no Unlock: the runtime ends the thread with it).
func (cl *client) enter() error {
	if cl.spec.Enter == nil {
		return nil
	}
	runtime.LockOSThread()
	return cl.spec.Enter()
}

func (cl *client) run(ctx context.Context, budget int64, start time.Time) {
	spec := cl.spec
	cl.payload = make([]byte, max(spec.Size, 9))
	for i := range cl.payload {
		cl.payload[i] = 'a' + byte(i%26)
	}
	cl.payload[len(cl.payload)-1] = '\n'
	cl.buf = make([]byte, 64<<10)
	defer func() {
		cl.close()
		if cl.udp != nil {
			cl.udp.Close()
		}
	}()
	if spec.Mode == ModeUDP {
		if err := cl.openUDP(); err != nil {
			cl.fail(cl.own[0], err)
			return
		}
	}
	var interval time.Duration
	if spec.Rate > 0 {
		interval = time.Duration(float64(spec.Clients) / spec.Rate * float64(time.Second))
	}
	next := start
	for k := 0; ctx.Err() == nil; k++ {
		if budget > 0 && int64(k) >= budget {
			return
		}
		if interval > 0 { // pacing to the requested rate, not synchronisation
			next = next.Add(interval)
			if wait := time.Until(next); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		var port int
		var err error
		t0 := time.Now()
		switch spec.Mode {
		case ModeConn:
			port = cl.own[k%len(cl.own)]
			err = cl.connRequest(spec.Addrs[port])
		case ModeClose:
			port = cl.own[k%len(cl.own)]
			err = cl.closeRequest(spec.Addrs[port])
		case ModeKeepAlive:
			port, err = cl.keepAliveRequest()
		case ModeUDP:
			port = cl.own[k%len(cl.own)]
			if spec.Burst > 1 {
				port = cl.own[cl.bursts%len(cl.own)] // k moves by a burst
				cl.bursts++
				n, d := cl.udpBurst(port)
				k += spec.Burst - 1
				cl.hist.RecordValues(max(d.Microseconds(), 1), int64(n))
				cl.ok[port] += int64(n)
				cl.spec.Live.ops.Add(int64(n))
				for range spec.Burst - n {
					cl.fail(port, errors.New("burst: echo not received within "+udpTimeout.String()))
				}
				continue
			}
			err = cl.udpRequest(port)
		case ModeBulk:
			port, err = cl.bulkRequest()
		default:
			err = fmt.Errorf("unknown mode %q", spec.Mode)
		}
		if err != nil {
			cl.fail(port, err)
			continue
		}
		cl.hist.RecordValue(max(time.Since(t0).Microseconds(), 1))
		cl.ok[port]++
		cl.spec.Live.ops.Add(1)
	}
}

func (cl *client) fail(port int, err error) {
	cl.failed[port]++
	cl.spec.Live.errs.Add(1)
	if len(cl.errs) < 3 {
		cl.errs = append(cl.errs, fmt.Sprintf("%s: %v", cl.spec.Addrs[port], err))
	}
}

// connRequest: connect, read the backend's name, echo one payload, close.
func (cl *client) connRequest(addr string) error {
	c, err := net.DialTimeout("tcp", addr, requestTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(requestTimeout))
	rd := bufio.NewReaderSize(c, 256)
	if _, err := rd.ReadString('\n'); err != nil {
		return fmt.Errorf("read name: %w", err)
	}
	return cl.echo(c, rd)
}

// keepAliveRequest echoes one payload over the open connection, opening
// one to the next owned port after PerConn requests or an error.
func (cl *client) keepAliveRequest() (int, error) {
	if cl.conn == nil || cl.used >= cl.spec.PerConn {
		cl.close()
		cl.cur = (cl.cur + 1) % len(cl.own)
		port := cl.own[cl.cur]
		c, err := net.DialTimeout("tcp", cl.spec.Addrs[port], requestTimeout)
		if err != nil {
			return port, err
		}
		cl.conn, cl.rd, cl.used = c, bufio.NewReaderSize(c, 256), 0
		c.SetDeadline(time.Now().Add(requestTimeout))
		if _, err := cl.rd.ReadString('\n'); err != nil {
			cl.close()
			return port, fmt.Errorf("read name: %w", err)
		}
	}
	port := cl.own[cl.cur]
	cl.used++
	cl.conn.SetDeadline(time.Now().Add(requestTimeout))
	if err := cl.echo(cl.conn, cl.rd); err != nil {
		cl.close()
		return port, err
	}
	return port, nil
}

// bulkRequest writes bulkOp bytes over the client's connection, moving
// to its next port after PerConn of them (or an error), as keepalive does.
func (cl *client) bulkRequest() (int, error) {
	if cl.conn == nil || cl.used >= cl.spec.PerConn {
		cl.close()
		cl.cur = (cl.cur + 1) % len(cl.own)
		c, err := net.DialTimeout("tcp", cl.spec.Addrs[cl.own[cl.cur]], requestTimeout)
		if err != nil {
			return cl.own[cl.cur], err
		}
		cl.conn, cl.used = c, 0
		if len(cl.bulk) == 0 {
			cl.bulk = make([]byte, 256<<10)
		}
	}
	port := cl.own[cl.cur]
	cl.used++
	cl.conn.SetDeadline(time.Now().Add(requestTimeout))
	for sent := 0; sent < bulkOp; sent += len(cl.bulk) {
		if _, err := cl.conn.Write(cl.bulk); err != nil {
			cl.close()
			return port, fmt.Errorf("write: %w", err)
		}
	}
	return port, nil
}

func (cl *client) echo(c net.Conn, rd *bufio.Reader) error {
	if _, err := c.Write(cl.payload); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if _, err := io.ReadFull(rd, cl.buf[:len(cl.payload)]); err != nil {
		return fmt.Errorf("read echo: %w", err)
	}
	return nil
}

func (cl *client) openUDP() error {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return fmt.Errorf("udp client: %w", err)
	}
	cl.udp = c
	c.SetReadBuffer(1 << 20) // a burst's echoes, whole
	cl.udpTo = make([]netip.AddrPort, len(cl.spec.Addrs))
	for _, i := range cl.own {
		ap, err := netip.ParseAddrPort(cl.spec.Addrs[i])
		if err != nil {
			return fmt.Errorf("udp client: %w", err)
		}
		cl.udpTo[i] = ap
	}
	return nil
}

// udpRequest sends a datagram numbered by seq and waits for its echo
// (the backend prefixes its name), skipping late echoes of earlier ones.
func (cl *client) udpRequest(port int) error {
	cl.seq++
	binary.BigEndian.PutUint64(cl.payload, cl.seq)
	cl.udp.SetDeadline(time.Now().Add(udpTimeout))
	if _, err := cl.udp.WriteToUDPAddrPort(cl.payload, cl.udpTo[port]); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	for {
		n, _, err := cl.udp.ReadFromUDPAddrPort(cl.buf)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		got := cl.buf[:n]
		if i := strings.IndexByte(string(got[:min(n, 64)]), ':'); i >= 0 && n-i-1 == len(cl.payload) &&
			binary.BigEndian.Uint64(got[i+1:]) == cl.seq {
			return nil
		}
	}
}

// udpBurst sends Burst numbered datagrams to port, then reads echoes
// until each has come back or udpTimeout passes; late echoes of earlier
// bursts are skipped. It returns how many came back, and when the last did.
func (cl *client) udpBurst(port int) (int, time.Duration) {
	burst := cl.spec.Burst
	if len(cl.seen) < burst {
		cl.seen = make([]bool, burst)
	}
	clear(cl.seen)
	first := cl.seq + 1
	t0 := time.Now()
	if cl.spec.GSO {
		cl.gsoBurst(port, burst)
	} else {
		cl.sendBurst(port, burst)
	}
	cl.udp.SetDeadline(t0.Add(udpTimeout))
	got := 0
	var took time.Duration
	for got < burst {
		n, _, err := cl.udp.ReadFromUDPAddrPort(cl.buf)
		if err != nil {
			break
		}
		b := cl.buf[:n]
		i := strings.IndexByte(string(b[:min(n, 64)]), ':')
		if i < 0 || n-i-1 != len(cl.payload) {
			continue
		}
		seq := binary.BigEndian.Uint64(b[i+1:])
		if seq < first || seq >= first+uint64(burst) || cl.seen[seq-first] {
			continue
		}
		cl.seen[seq-first] = true
		got++
		took = time.Since(t0)
	}
	return got, took
}

// sendBurst sends burst numbered datagrams to port, a datagram per call;
// one the kernel refuses ends the burst, the rest counted as missing.
func (cl *client) sendBurst(port, burst int) {
	for range burst {
		cl.seq++
		binary.BigEndian.PutUint64(cl.payload, cl.seq)
		if _, err := cl.udp.WriteToUDPAddrPort(cl.payload, cl.udpTo[port]); err != nil {
			return
		}
	}
}

// close ends the keepalive connection.
func (cl *client) close() {
	if cl.conn != nil {
		cl.conn.Close()
		cl.conn = nil
	}
}

// live counts requests as they happen, for the timeline and progress.
type live struct {
	ops, errs atomic.Int64
	target    atomic.Value // string: who is being loaded now
}
