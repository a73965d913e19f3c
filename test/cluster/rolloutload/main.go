// rolloutload is the rollout check's backend and its clients (cluster.sh
// rollout): the backend answers HTTP, UDP and long-lived TCP streams; the
// clients make a connection per request, or hold streams open, and write
// every failure as a JSON line with its time, so a report can put each
// failure against the event it happened in.
//
//	rolloutload serve                       HTTP :8080 (the hostname), UDP :8081 (the hostname), line echo :8082
//	rolloutload load [flags]                clients until SIGTERM or -duration; a summary line per client at the end
//	rolloutload stop                        SIGTERM to PID 1 (a pod's client, from kubectl exec)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rolloutload serve|load|stop [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve()
	case "load":
		load(os.Args[2:])
	case "stop":
		p, _ := os.FindProcess(1)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			fmt.Fprintln(os.Stderr, "stop:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: rolloutload serve|load|stop [flags]")
		os.Exit(2)
	}
}

func serve() {
	name, _ := os.Hostname()
	go func() {
		pc, err := net.ListenPacket("udp", ":8081")
		if err != nil {
			fatal(err)
		}
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				continue
			}
			// The request's token back, then the name: the client checks both.
			pc.WriteTo([]byte(strings.TrimSpace(string(buf[:n]))+" "+name), from)
		}
	}()
	go func() {
		l, err := net.Listen("tcp", ":8082")
		if err != nil {
			fatal(err)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				continue
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, name) })
	fatal(http.ListenAndServe(":8080", nil))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// record is one output line.
type record struct {
	Time   time.Time `json:"t"`
	Client string    `json:"client"`
	// Kind: "fail" (a request), "break" (an established stream), "summary".
	Kind     string `json:"kind"`
	Error    string `json:"error,omitempty"`
	Requests int64  `json:"requests,omitempty"`
	Failed   int64  `json:"failed,omitempty"`
	Streams  int64  `json:"streams,omitempty"`
	Broken   int64  `json:"broken,omitempty"`
	// Exchanges on streams.
	Exchanges int64 `json:"exchanges,omitempty"`
}

type output struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *output) write(r record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.enc.Encode(r)
}

type pairs []string

func (p *pairs) String() string     { return strings.Join(*p, ",") }
func (p *pairs) Set(s string) error { *p = append(*p, s); return nil }

func load(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	var httpC, udpC, streamC, cycledC pairs
	fs.Var(&httpC, "http", "NAME=URL: a client making a connection per HTTP GET (repeatable)")
	fs.Var(&udpC, "udp", "NAME=HOST:PORT: a client sending each request from a new UDP socket (repeatable)")
	fs.Var(&streamC, "stream", "NAME=HOST:PORT: long-lived TCP streams, an exchange every -stream-interval, open until the end (repeatable)")
	fs.Var(&cycledC, "cycled-stream", "NAME=HOST:PORT: streams as -stream, each closed cleanly after -stream-life and opened anew, so every process has streams of its own (repeatable)")
	workers := fs.Int("workers", 2, "concurrent requests per request client")
	streams := fs.Int("streams", 4, "connections per stream client")
	interval := fs.Duration("interval", 20*time.Millisecond, "pause between a worker's requests")
	streamInterval := fs.Duration("stream-interval", 200*time.Millisecond, "pause between a stream's exchanges")
	streamLife := fs.Duration("stream-life", 20*time.Second, "a cycled stream's life")
	timeout := fs.Duration("timeout", 2*time.Second, "a request's (or an exchange's) deadline, curl -m 2 as operators run it")
	duration := fs.Duration("duration", 30*time.Minute, "stop after this long at the latest")
	fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	out := &output{enc: json.NewEncoder(os.Stdout)}
	var wg sync.WaitGroup
	run := func(spec string, f func(ctx context.Context, name, target string, out *output) record) {
		name, target, ok := strings.Cut(spec, "=")
		if !ok {
			fatal(fmt.Errorf("want NAME=TARGET, got %q", spec))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f(ctx, name, target, out)
			r.Time, r.Client, r.Kind = time.Now().UTC(), name, "summary"
			out.write(r)
		}()
	}
	for _, s := range httpC {
		run(s, func(ctx context.Context, name, url string, out *output) record {
			return requests(ctx, name, *workers, *interval, out, func() error { return get(url, *timeout) })
		})
	}
	for _, s := range udpC {
		run(s, func(ctx context.Context, name, addr string, out *output) record {
			var seq atomic.Int64
			return requests(ctx, name, *workers, *interval, out, func() error { return udpRequest(addr, seq.Add(1), *timeout) })
		})
	}
	for _, s := range streamC {
		run(s, func(ctx context.Context, name, addr string, out *output) record {
			return streamClients(ctx, name, addr, *streams, *streamInterval, 0, *timeout, out)
		})
	}
	for _, s := range cycledC {
		run(s, func(ctx context.Context, name, addr string, out *output) record {
			return streamClients(ctx, name, addr, *streams, *streamInterval, *streamLife, *timeout, out)
		})
	}
	wg.Wait()
}

// requests runs workers each making requests until ctx ends.
func requests(ctx context.Context, name string, workers int, interval time.Duration, out *output, do func() error) record {
	var n, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := do()
				n.Add(1)
				if err != nil {
					failed.Add(1)
					out.write(record{Time: time.Now().UTC(), Client: name, Kind: "fail", Error: err.Error()})
				}
				select {
				case <-ctx.Done():
				case <-time.After(interval):
				}
			}
		}()
	}
	wg.Wait()
	return record{Requests: n.Load(), Failed: failed.Load()}
}

// get makes one GET on a connection of its own (DNS resolved anew).
func get(url string, timeout time.Duration) error {
	c := http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || len(strings.TrimSpace(string(b))) == 0 {
		return fmt.Errorf("status %d, body %q", resp.StatusCode, b)
	}
	return nil
}

// udpRequest sends one datagram from a new socket (a new source port, as
// a new DNS query has) and waits for the answer that carries its token.
func udpRequest(addr string, seq int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("udp", addr) // resolves the name: DNS too
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	token := fmt.Sprintf("req-%d-%d", os.Getpid(), seq)
	if _, err := c.Write([]byte(token)); err != nil {
		return err
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); !strings.HasPrefix(got, token+" ") {
		return fmt.Errorf("answer %q to %q", got, token)
	}
	return nil
}

// streamClients keeps n streams open until ctx ends; a stream that breaks
// is recorded and opened again.
func streamClients(ctx context.Context, name, addr string, n int, interval, life, timeout time.Duration, out *output) record {
	var opened, broken, exchanges atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := stream(ctx, addr, i, interval, life, timeout, &opened, &exchanges)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					continue // lived its life: the next one
				}
				broken.Add(1)
				out.write(record{Time: time.Now().UTC(), Client: name, Kind: "break", Error: err.Error()})
				select {
				case <-ctx.Done():
				case <-time.After(interval):
				}
			}
		}()
	}
	wg.Wait()
	return record{Streams: opened.Load(), Broken: broken.Load(), Exchanges: exchanges.Load()}
}

var errOpen = errors.New("open")

// stream is one connection: a line out, the same line back, every interval.
func stream(ctx context.Context, addr string, id int, interval, life, timeout time.Duration, opened, exchanges *atomic.Int64) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %v", errOpen, err)
	}
	defer c.Close()
	opened.Add(1)
	r := bufio.NewReader(c)
	var end <-chan time.Time
	if life > 0 {
		end = time.After(life)
	}
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			return nil
		case <-time.After(interval):
		}
		line := fmt.Sprintf("stream %d line %d\n", id, seq)
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := io.WriteString(c, line); err != nil {
			return fmt.Errorf("exchange %d: %v", seq, err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("exchange %d: %v", seq, err)
		}
		if got != line {
			return fmt.Errorf("exchange %d: got %q, want %q", seq, got, line)
		}
		exchanges.Add(1)
	}
}
