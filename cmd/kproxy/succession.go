package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/healthcheck"
	"github.com/kproxy/kproxy/portal/datapath"
	"github.com/kproxy/kproxy/portal/keeper"
)

// succession is this process's place among the node's kproxy processes
// (a rollout runs the next pod's beside this one): it takes the listening
// sockets a serving predecessor shares, marks itself serving once ready
// and shares its own sockets meanwhile, and tells at SIGTERM whether a
// successor serves. The marks live beside the proxy ports file, in the
// node's /run/kproxy (serving_unix.go).
type succession struct {
	dir string
	log zerolog.Logger

	mu        sync.Mutex
	mark      *servingMark // while ready
	stopShare context.CancelFunc
}

// socketSources reaches the socket keeper (--socket-keeper) and, in the
// kernel modes, the node's serving processes, and gives cfg the sockets
// they hold. Either may be missing: proxying goes on, and only a kill -9
// refuses connections until the next start, as without them.
func (o runOptions) socketSources(ctx context.Context, cfg *actors.Config, log zerolog.Logger) (*keeper.Client, *succession) {
	var sockets *keeper.Client
	if o.socketKeeper != "" {
		k, err := dialKeeper(ctx, o.socketKeeper, log)
		if err != nil {
			log.Warn().Err(err).Msg("no socket keeper: its sockets will not outlive this process")
		} else {
			log.Info().Str("socket", o.socketKeeper).Int("kept", k.Waiting()).Msg("socket keeper reached; taking back the sockets it kept")
			sockets = k
		}
	}
	var succ *succession // beside the proxy ports file: the kernel modes
	if datapath.UsesProxyPorts(o.portalMode) {
		succ = newSuccession(o.proxyPortsFile, log)
	}
	if donor := succ.predecessor(); sockets != nil || donor != nil {
		cfg.Keeper = inherited{keeper: sockets, donor: donor, noConns: !o.keepConnections}
	}
	return sockets, succ
}

// newSuccession returns nil without a proxy ports file (no node directory).
func newSuccession(proxyPortsFile string, log zerolog.Logger) *succession {
	if proxyPortsFile == "" {
		return nil
	}
	return &succession{dir: filepath.Join(filepath.Dir(proxyPortsFile), "serving"), log: log}
}

// predecessor takes the sockets a serving process shares, or returns nil.
func (s *succession) predecessor() *keeper.Client {
	if s == nil {
		return nil
	}
	for _, mark := range liveServing(s.dir, nil) {
		if !sameNetNamespace(mark) {
			s.log.Warn().Str("mark", mark).Msg("a kproxy of another network namespace serves beside this one (is /run/kproxy shared?); not taking its sockets")
			continue
		}
		d, err := keeper.DialDonor(mark+".sock", s.log)
		if err != nil {
			continue
		}
		s.log.Info().Int("sockets", d.Waiting()).Msg("sharing the listening sockets of the process serving beside this one")
		return d
	}
	return nil
}

// watch marks this process serving, and shares its sockets, while ready.
func (s *succession) watch(ready *healthcheck.Readiness, ls *datapath.Listeners) {
	if s == nil {
		return
	}
	ready.Watch(func(ok bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !ok {
			if s.stopShare != nil {
				s.stopShare()
			}
			s.mark.clear()
			s.mark, s.stopShare = nil, nil
			return
		}
		m, err := markServing(s.dir)
		if err != nil {
			s.log.Warn().Err(err).Msg("cannot mark this process serving: a successor would not see it")
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := keeper.ServeSockets(ctx, m.path+".sock", ls.EachSocket, s.log); err != nil {
			s.log.Warn().Err(err).Msg("cannot share the listening sockets: a successor opens its own")
		}
		s.mark, s.stopShare = m, cancel
	})
}

// successorServing reports whether another process serves beside this one.
func (s *succession) successorServing() bool {
	if s == nil {
		return true // no way to tell: hand over, as always
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(liveServing(s.dir, s.mark)) > 0
}

// inherited are the sockets this process starts with: those the socket
// keeper kept (a previous process of this pod was killed), else those the
// serving predecessor shares (a hand-over); the keeper keeps a copy of
// every socket this process holds. It is the Listeners' SocketKeeper.
type inherited struct {
	keeper, donor *keeper.Client // either may be nil
	noConns       bool           // the keeper holds listening sockets only (--socket-keeper-connections=false)
}

func (i inherited) Take(network, address string) *os.File {
	if i.keeper != nil {
		if f := i.keeper.Take(network, address); f != nil {
			return f
		}
	}
	if i.donor != nil {
		if f := i.donor.Take(network, address); f != nil {
			if i.keeper != nil {
				if rc, err := f.SyscallConn(); err == nil {
					rc.Control(func(fd uintptr) { i.keeper.Keep(network, address, fd) })
				}
			}
			return f
		}
	}
	return nil
}

func (i inherited) Keep(network, address string, fd uintptr) {
	if i.keeper != nil {
		i.keeper.Keep(network, address, fd)
	}
}

func (i inherited) Drop(network, address string) {
	if i.keeper != nil {
		i.keeper.Drop(network, address)
	}
}

func (i inherited) DropRest() {
	if i.keeper != nil {
		i.keeper.DropRest()
	}
	if i.donor != nil {
		i.donor.DropRest() // closes this process's copies only
	}
}

func (i inherited) KeepConn(network, address, id string, fds ...int) string {
	if i.keeper == nil {
		return ""
	}
	return i.keeper.KeepConn(network, address, id, fds...)
}

func (i inherited) DropConn(id string) {
	if i.keeper != nil {
		i.keeper.DropConn(id)
	}
}

// TakeConns returns the connections the keeper held (a predecessor that
// shares its sockets keeps and drains its connections itself).
func (i inherited) TakeConns(network, address string) []datapath.KeptConn {
	if i.keeper == nil {
		return nil
	}
	var cs []datapath.KeptConn
	for _, c := range i.keeper.TakeConns(network, address) {
		cs = append(cs, datapath.KeptConn(c))
	}
	return cs
}

func (i inherited) KeepFlow(network, address, client string, reply []byte, fd int) string {
	if i.keeper == nil {
		return ""
	}
	return i.keeper.KeepFlow(network, address, client, reply, fd)
}

// TakeFlows returns the UDP flows the keeper held (a serving predecessor
// answers its own flows).
func (i inherited) TakeFlows(network, address string) []datapath.KeptFlow {
	if i.keeper == nil {
		return nil
	}
	var fs []datapath.KeptFlow
	for _, f := range i.keeper.TakeFlows(network, address) {
		fs = append(fs, datapath.KeptFlow(f))
	}
	return fs
}

func (i inherited) Detached() bool { return i.keeper != nil && i.keeper.Detached() }

func (i inherited) KeepsConns() bool { return i.keeper != nil && !i.noConns }
