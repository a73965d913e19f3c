package healthcheck

import "sync"

// The stages a process is ready after, each once: the first state's
// service ports all listening, and the kernel rules programmed to point at
// them (the kernel portals only).
const (
	StageServicePorts = "servicePorts"
	StageRules        = "rules"
)

// Readiness says whether this process serves the node: every stage it
// waits for has completed once, and it is not draining. It is what a
// DaemonSet rolling with surge must wait for before it stops the previous
// pod: kube-proxy's /healthz is healthy from the start (a stage that never
// updated is starting up), which would let the old process go while the
// new one has not opened its ports yet.
type Readiness struct {
	mu       sync.Mutex
	waiting  map[string]bool
	draining bool
	watchers []func(ready bool)
}

// NewReadiness returns a Readiness waiting for stages.
func NewReadiness(stages ...string) *Readiness {
	r := &Readiness{waiting: map[string]bool{}}
	for _, s := range stages {
		r.waiting[s] = true
	}
	return r
}

// Done records that stage completed; later calls change nothing. Calls on
// a nil *Readiness do nothing.
func (r *Readiness) Done(stage string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	was := r.ready()
	delete(r.waiting, stage)
	r.changed(was)
}

// Drain makes the process not ready for good: it is stopping.
func (r *Readiness) Drain() {
	if r == nil {
		return
	}
	r.mu.Lock()
	was := r.ready()
	r.draining = true
	r.changed(was)
}

// Ready reports whether the process serves.
func (r *Readiness) Ready() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready()
}

// Watch calls f with the readiness now and at every change, in order.
func (r *Readiness) Watch(f func(ready bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchers = append(r.watchers, f)
	f(r.ready())
}

func (r *Readiness) ready() bool { return len(r.waiting) == 0 && !r.draining }

// changed unlocks r, having told the watchers if readiness changed. They
// are called under the lock, so they see the changes in order.
func (r *Readiness) changed(was bool) {
	defer r.mu.Unlock()
	if now := r.ready(); now != was {
		for _, f := range r.watchers {
			f(now)
		}
	}
}
