package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Proc is a proxy process under test (kproxy or HAProxy), its output kept
// in a log file for the error report.
type Proc struct {
	Name    string
	Metrics string // kproxy's metrics address, empty for HAProxy
	// Tree: the process works through children (nginx's workers); its
	// figures are the sums over it and its descendants.
	Tree    bool
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan struct{}
	err     error // of Wait, once done is closed
}

// startProc runs argv with its output in logPath.
func startProc(name, logPath string, argv, env []string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p := &Proc{Name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, argv[0], err)
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Started is when the process was started.
func (p *Proc) Started() time.Time { return p.started }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// exitError says how the process ended, with the end of its log.
func (p *Proc) exitError() error {
	return fmt.Errorf("%s exited (%v); end of %s:\n%s", p.Name, p.err, p.log, tail(p.log, 15))
}

// Stat reads the process's figures from /proc.
func (p *Proc) Stat() (ProcStat, error) {
	if p.Tree {
		return readProcTree(p.Pid())
	}
	return readProc(p.Pid())
}

// Stop asks the process to end (SIGTERM, or a kill where signals are not
// available) and waits; a process still running after 15 s is killed.
func (p *Proc) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(terminateSignal); err != nil {
		p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) did not stop within 15 s of SIGTERM; killed", p.Name, p.Pid())
	}
}

// Goroutines and restarts read kproxy's /metrics (the Go collector's
// go_goroutines and kproxy_actor_restarts_total summed over roles).
func (p *Proc) scrape(ctx context.Context, client *http.Client) (goroutines, restarts int64, err error) {
	if p.Metrics == "" {
		return 0, 0, errors.New("no metrics endpoint")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Metrics+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("scrape %s metrics: %w", p.Name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "go_goroutines "):
			goroutines = int64(metricValue(line))
		case strings.HasPrefix(line, "kproxy_actor_restarts_total{"):
			restarts += int64(metricValue(line))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("scrape %s metrics: %w", p.Name, err)
	}
	return goroutines, restarts, nil
}

// metricValue is the sample value of a Prometheus text line (no timestamp).
func metricValue(line string) float64 {
	i := strings.LastIndexByte(line, ' ')
	v, _ := strconv.ParseFloat(line[i+1:], 64)
	return v
}

// freePort finds a port on 127.0.0.1 nobody listens on now, for the
// kproxy under test's metrics and admin servers.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		f.Seek(-64<<10, io.SeekEnd)
	}
	raw, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
