package harness

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress draws one line on a terminal: the current step, a bar filling
// over its planned length, and the requests so far. Nil draws nothing.
type progress struct {
	w     io.Writer
	live  *live
	mu    sync.Mutex
	label string
	begin time.Time
	plan  time.Duration
	stopc chan struct{}
	done  chan struct{}
}

func newProgress(w io.Writer, l *live) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, live: l, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				fmt.Fprint(p.w, "\r\033[K")
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

// step starts a step expected to take plan (0: unknown, the bar spins).
func (p *progress) step(label string, plan time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label, p.begin, p.plan = label, time.Now(), plan
	p.mu.Unlock()
}

// println prints a line above the bar.
func (p *progress) println(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\033[K%s\n", line)
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	label, begin, plan := p.label, p.begin, p.plan
	const width = 30
	elapsed := time.Since(begin)
	filled := width
	if plan > 0 {
		filled = min(int(float64(width)*elapsed.Seconds()/plan.Seconds()), width)
	}
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if plan <= 0 {
		i := int(elapsed/(200*time.Millisecond)) % width
		bar = strings.Repeat(" ", i) + "*" + strings.Repeat(" ", width-i-1)
	}
	fmt.Fprintf(p.w, "\r\033[K%-44.44s [%s] %5.1fs  %d ok  %d failed", label, bar, elapsed.Seconds(), p.live.ops.Load(), p.live.errs.Load())
}

func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.stopc)
	<-p.done
}

// PhaseProgress writes how far a long phase is, a line every 10 s, where
// a bar is not drawn (a test's log): hollow rounds take minutes. Nil
// writes nothing.
type PhaseProgress struct {
	w     io.Writer
	what  string
	total int
	last  time.Time
}

// NewPhaseProgress is the progress of what, total steps; w nil: none.
func NewPhaseProgress(w io.Writer, what string, total int) *PhaseProgress {
	if w == nil {
		return nil
	}
	return &PhaseProgress{w: w, what: what, total: total, last: time.Now()}
}

// At says done steps are done.
func (p *PhaseProgress) At(done int) {
	if p == nil || time.Since(p.last) < 10*time.Second {
		return
	}
	fmt.Fprintf(p.w, "%s: %d of %d\n", p.what, done, p.total)
	p.last = time.Now()
}
