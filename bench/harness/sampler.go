package harness

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// sampler records the timeline: every interval, the load's counters and
// each proxy process's /proc figures (and kproxy's goroutines and restarts
// from its /metrics). It ends when stop is called.
type sampler struct {
	start   time.Time
	live    *live
	procs   []*Proc
	scraped map[string]scrape // the last /metrics reading per process
	mu      sync.Mutex
	samples []Sample
	cancel  context.CancelFunc
	done    chan struct{}
}

// scrapeInterval: /metrics is read at most this often, /proc at every
// sample. A scrape costs the proxy (its text for a thousand service ports
// is large), and that cost is charged to its CPU per request though
// HAProxy is never scraped. Every 5 s is still 3-12 times as often as
// Prometheus usually scrapes.
const scrapeInterval = 5 * time.Second

// scrape is one reading of /metrics.
type scrape struct {
	at                   time.Time
	goroutines, restarts int64
}

// timelineInterval aims at about 200 samples over a scenario, within
// 100 ms and 1 s.
func timelineInterval(expected time.Duration) time.Duration {
	return min(max(expected/200, 100*time.Millisecond), time.Second)
}

func startSampler(start time.Time, l *live, interval time.Duration, procs ...*Proc) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{start: start, live: l, procs: procs, scraped: map[string]scrape{}, cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.sample(ctx, client)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample(ctx context.Context, client *http.Client) {
	smp := Sample{T: time.Since(s.start).Seconds(), Ops: s.live.ops.Load(), Errors: s.live.errs.Load(), Procs: map[string]ProcPoint{}}
	if t, ok := s.live.target.Load().(string); ok {
		smp.Target = t
	}
	for _, p := range s.procs {
		st, err := p.Stat()
		if err != nil {
			continue // exited, or no /proc: a gap in the chart
		}
		pt := ProcPoint{CPUSeconds: st.CPU.Seconds(), RSS: st.RSS, FDs: st.FDs, Threads: st.Threads}
		if p.Metrics != "" {
			last := s.scraped[p.Name]
			if time.Since(last.at) >= scrapeInterval {
				last.at = time.Now()
				last.goroutines, last.restarts, _ = p.scrape(ctx, client)
				s.scraped[p.Name] = last
			}
			pt.Goroutines, pt.Restarts = last.goroutines, last.restarts
		}
		smp.Procs[p.Name] = pt
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends sampling (after one last sample) and returns the timeline.
func (s *sampler) stop() []Sample {
	s.cancel()
	<-s.done
	s.sample(context.Background(), &http.Client{Timeout: time.Second})
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// httpClient scrapes metrics outside the sampler.
var httpClient = &http.Client{Timeout: 5 * time.Second}
