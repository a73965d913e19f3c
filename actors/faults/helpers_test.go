package faults_test

import (
	"context"
	"fmt"
	"net"
	"path"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors"
	"github.com/kproxy/kproxy/actors/faults"
	"github.com/kproxy/kproxy/messages"
	"github.com/kproxy/kproxy/test/actortest"
	"github.com/kproxy/kproxy/test/backends"
	"github.com/kproxy/kproxy/watcher"
)

// tree is a running actor tree that takes faults, fed from a Store as a
// file source would feed it.
type tree struct {
	p     *actors.Proxy
	inj   *faults.Injector
	store *watcher.Store
	w     *stateWaiter
}

// startTree starts cfg on loopback, prepared for fault injection, logging
// to the test at level.
func startTree(t *testing.T, cfg actors.Config, level zerolog.Level) *tree {
	t.Helper()
	store := watcher.NewStore()
	cfg.View, cfg.BindAddress = store, "127.0.0.1"
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(level)
	inject := faults.Prepare(&cfg)
	p := actors.Start(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &tree{p: p, inj: faults.New(p, inject), store: store, w: watchState(t, p)}
}

// submit replaces the desired state and has the Watcher apply it at once,
// as the file source's reload does without its coalescing window.
func (tr *tree) submit(spes ...*messages.ServicePortEndpoints) {
	tr.store.Replace(spes, nil, false)
	tr.p.SourceSynced()
}

// restarts sends the last name segment of every actor restarted
// ("portal" for a Portal) to the channel it returns.
func (tr *tree) restarts(t *testing.T) <-chan string {
	ch := make(chan string, 1024)
	sub := tr.p.System.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*actor.SupervisorEvent); ok {
			ch <- path.Base(e.Child.GetId())
		}
	})
	t.Cleanup(func() { tr.p.System.EventStream.Unsubscribe(sub) })
	return ch
}

// stateWaiter waits for conditions on the latest ServicePortStates the
// Proxier published.
type stateWaiter struct{ *actortest.States }

func watchState(t *testing.T, p *actors.Proxy) *stateWaiter {
	return &stateWaiter{actortest.WatchStates(t, p.Subscribe)}
}

// listening waits until service port id listens on one address.
func (w *stateWaiter) listening(t *testing.T, id string) *messages.ServicePortState {
	t.Helper()
	var st *messages.ServicePortState
	w.Wait(t, id+" listening", func(m map[string]*messages.ServicePortState) bool {
		st = m[id]
		return st != nil && !st.GetDeleted() && len(st.GetListenAddresses()) == 1
	})
	return st
}

func svcPort(name, clusterIP string, port int) *messages.ServicePort {
	return &messages.ServicePort{
		Key:  &messages.ServicePortKey{Namespace: "default", Name: name, PortName: "p", Protocol: messages.Protocol_TCP},
		Type: "ClusterIP", Port: int32(port), TargetPort: int32(port),
		ClusterIps: &messages.IPSet{V4: []string{clusterIP}},
	}
}

func spe(sp *messages.ServicePort, addrs []string) *messages.ServicePortEndpoints {
	var eps []*messages.Endpoint
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		eps = append(eps, &messages.Endpoint{Ips: []string{host}, Port: int32(p), Ready: true, Serving: true, Internal: true, External: true})
	}
	return &messages.ServicePortEndpoints{ServicePort: sp, Endpoints: eps}
}

// tcpBackends starts n loopback echo backends named backend-0.. and
// returns their addresses.
func tcpBackends(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for i := range n {
		b, err := backends.StartTCP(fmt.Sprintf("backend-%d", i), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		addrs = append(addrs, b.Addr())
	}
	return addrs
}
