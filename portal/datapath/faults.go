package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Fault modes for an endpoint.
const (
	FaultFail  = "fail"  // dials fail at once, as to a dead pod (connection refused)
	FaultStall = "stall" // dials hang until their timeout and time out, as to a blackholed node
	// FaultPanic makes the connection handler dialling the endpoint panic:
	// a bug in the data path, which must cost that connection only.
	FaultPanic = "panic"
)

// ErrInjectedFault is the error of a dial failed by fault injection.
var ErrInjectedFault = errors.New("injected endpoint fault")

// Faults makes chosen endpoints' dials fail or stall for a while. A nil
// *Faults injects nothing, so the data path pays one nil check when fault
// injection is off.
type Faults struct {
	mu sync.Mutex
	m  map[string]fault
	// accept is, by service port, until when its TCP listeners' accepts
	// fail with EMFILE.
	accept map[string]time.Time
}

type fault struct {
	mode  string
	until time.Time
}

// NewFaults returns an empty fault table.
func NewFaults() *Faults { return &Faults{m: map[string]fault{}, accept: map[string]time.Time{}} }

// SetAcceptFault makes accepts on servicePort's TCP listeners fail with
// EMFILE for d, as when the process runs out of file descriptors: new
// connections wait in the listen backlog meanwhile.
func (f *Faults) SetAcceptFault(servicePort string, d time.Duration) {
	f.mu.Lock()
	f.accept[servicePort] = time.Now().Add(d)
	f.mu.Unlock()
}

// ErrInjectedEMFILE is an accept failed by fault injection.
var ErrInjectedEMFILE = fmt.Errorf("injected accept fault: %w", syscall.EMFILE)

// AcceptFault returns ErrInjectedEMFILE while servicePort's accept fault
// lasts.
func (f *Faults) AcceptFault(servicePort string) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := f.accept[servicePort]
	switch {
	case !ok:
		return nil
	case time.Now().After(until):
		delete(f.accept, servicePort)
		return nil
	}
	return ErrInjectedEMFILE
}

// Set makes dials to endpoint ("ip:port") fail or stall for d.
func (f *Faults) Set(endpoint, mode string, d time.Duration) error {
	if mode != FaultFail && mode != FaultStall && mode != FaultPanic {
		return fmt.Errorf("fault mode %q: want %s, %s or %s", mode, FaultFail, FaultStall, FaultPanic)
	}
	f.mu.Lock()
	f.m[endpoint] = fault{mode: mode, until: time.Now().Add(d)}
	f.mu.Unlock()
	return nil
}

// Before is called before dialling endpoint with the dial's timeout: it
// returns nil when no fault is active, else waits as the fault says and
// returns the error the dial would have.
func (f *Faults) Before(endpoint string, timeout time.Duration) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	flt, ok := f.m[endpoint]
	if ok && time.Now().After(flt.until) {
		delete(f.m, endpoint)
		ok = false
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	if flt.mode == FaultPanic {
		panic(fmt.Sprintf("injected panic dialing %s", endpoint))
	}
	if flt.mode == FaultStall && timeout > 0 {
		time.Sleep(min(timeout, time.Until(flt.until)))
		// A timeout, as the kernel's would be (os.ErrDeadlineExceeded).
		return fmt.Errorf("dial %s: %w (stalled %v): %w", endpoint, ErrInjectedFault, timeout, os.ErrDeadlineExceeded)
	}
	return fmt.Errorf("dial %s: %w", endpoint, ErrInjectedFault)
}
