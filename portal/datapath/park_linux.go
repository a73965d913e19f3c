package datapath

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The parking set: idle listening sockets without a goroutine each.
//
// A goroutine blocked in Accept or in a UDP read holds its stack (about
// 4.5 KiB) for as long as its socket is idle, and most service ports are
// idle most of the time. A parked socket is registered instead, with
// EPOLLIN|EPOLLONESHOT, in one epoll set of the process, and one goroutine
// waits on that set. When a parked socket becomes readable (a connection or
// a datagram queued, or the socket broken), that goroutine starts the
// listener's serving loop again (Listener.wake); the loop parks the socket
// again after ParkAfter without traffic. A socket may be in Go's own
// netpoller and in this set at once: epoll registrations belong to a set.
// ONESHOT disarms the socket when its event is delivered, so one readiness
// wakes the listener once; parking again re-arms it (EPOLL_CTL_MOD).
// Readiness is level-triggered: a connection that arrived while the loop
// was returning wakes the listener as soon as it is parked.

// parkingSupported: Linux has the parking set; other systems serve every
// listener with a goroutine, as before.
const parkingSupported = true

type parkingSet struct {
	epfd int
	mu   sync.Mutex
	// byFD is the listener of each registered socket. A socket leaves the
	// set before it is closed (Listener.Close), so its number is not
	// reused while registered; an event read just before a socket left
	// can still reach the next listener given that number, which then
	// runs its loop for nothing and parks again.
	byFD map[int32]*Listener
}

var (
	parkingOnce sync.Once
	parking     *parkingSet
	parkingErr  error
)

// theParkingSet returns the process's parking set, made on first use.
func theParkingSet() (*parkingSet, error) {
	parkingOnce.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			parkingErr = fmt.Errorf("create the parking set: %w", err)
			return
		}
		parking = &parkingSet{epfd: fd, byFD: map[int32]*Listener{}}
		go parking.run()
	})
	return parking, parkingErr
}

// park arms l's socket in the parking set: l.wake is called once when it
// becomes readable. l.mu is held.
func park(l *Listener) error {
	s, err := theParkingSet()
	if err != nil {
		return err
	}
	fd := int32(l.fd)
	op := unix.EPOLL_CTL_MOD // registered already, disarmed by its last event
	if !l.registered {
		op = unix.EPOLL_CTL_ADD
		s.mu.Lock()
		s.byFD[fd] = l
		s.mu.Unlock()
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: fd}
	if err := unix.EpollCtl(s.epfd, op, int(fd), &ev); err != nil {
		if !l.registered {
			s.mu.Lock()
			delete(s.byFD, fd)
			s.mu.Unlock()
		}
		return fmt.Errorf("park %s/%s: %w", l.Spec.Network, l.Spec.Address, err)
	}
	l.registered = true
	return nil
}

// unpark takes l's socket out of the parking set, so no event of it wakes
// l any more. l.mu is held.
func unpark(l *Listener) {
	if !l.registered {
		return
	}
	fd := int32(l.fd)
	// Only fails if the socket is not in the set, which it is.
	_ = unix.EpollCtl(parking.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	parking.mu.Lock()
	if parking.byFD[fd] == l {
		delete(parking.byFD, fd)
	}
	parking.mu.Unlock()
	l.registered = false
}

// run waits for parked sockets to become readable and wakes their
// listeners. It blocks in epoll_wait, holding one thread while it waits.
func (s *parkingSet) run() {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(s.epfd, events, -1)
		if err != nil {
			// EINTR; the others (EBADF, EFAULT, EINVAL) cannot happen on
			// a set this process owns and never closes, but must not
			// spin if they did.
			if err != unix.EINTR {
				time.Sleep(time.Second)
			}
			continue
		}
		for _, ev := range events[:n] {
			s.mu.Lock()
			l := s.byFD[ev.Fd]
			s.mu.Unlock()
			if l != nil {
				l.wake()
			}
		}
	}
}
