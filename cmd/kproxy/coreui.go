package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/kproxy/kproxy/actors/remote"
	"github.com/kproxy/kproxy/messages"
)

// The core's page (kproxy watch --serve ... --ui-address): read-only, one
// file with its script and style inside, so nothing is fetched from
// anywhere but the core.
//
//go:embed coreui/index.html
var coreUIPage []byte

// coreUIStreamPeriod is how often the page's event stream looks for a
// change of the core's figures; it sends only when they changed.
const coreUIStreamPeriod = 250 * time.Millisecond

// coreStatsTimeout bounds one question to the core's actor.
const coreStatsTimeout = 2 * time.Second

// coreView is GET /api/core: the core, a summary of every subscription,
// and one page of those the filter matches (a core may serve thousands).
type coreView struct {
	Address  string           `json:"address"`
	Source   string           `json:"source"`
	Started  time.Time        `json:"started"`
	Now      time.Time        `json:"now"`
	Counters coreCountersView `json:"counters"`
	Summary  coreSummary      `json:"summary"`
	// Matched is how many subscriptions the filter matches; Subscribers
	// holds those from Offset, at most a page's limit, by node.
	Matched     int              `json:"matched"`
	Offset      int              `json:"offset"`
	Subscribers []subscriberView `json:"subscribers"`
}

// coreSummary is every subscription at a glance.
type coreSummary struct {
	InSync   int `json:"inSync"`
	Applying int `json:"applying"`
	Behind   int `json:"behind"`
	// MaxLagSeconds is the longest any subscriber has had messages
	// unacknowledged without catching up, and whose.
	MaxLagSeconds float64 `json:"maxLagSeconds"`
	MaxLagNode    string  `json:"maxLagNode,omitempty"`
}

// coreQuery is a page of the subscriptions: ?q=FILTER&offset=N&limit=N.
type coreQuery struct {
	filter        string
	offset, limit int
}

// Page sizes of the core's page.
const (
	coreUIDefaultLimit = 100
	coreUIMaxLimit     = 1000
)

func parseCoreQuery(r *http.Request) coreQuery {
	q := coreQuery{filter: strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q"))), limit: coreUIDefaultLimit}
	if n, err := strconv.Atoi(r.URL.Query().Get("offset")); err == nil && n > 0 {
		q.offset = n
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		q.limit = min(n, coreUIMaxLimit)
	}
	return q
}

func (q coreQuery) matches(s subscriberView) bool {
	return q.filter == "" || strings.Contains(strings.ToLower(s.Node+" "+s.Client+" "+s.Subscriber), q.filter)
}

type coreCountersView struct {
	Subscriptions int64 `json:"subscriptions"`
	Snapshots     int64 `json:"snapshots"`
	Deltas        int64 `json:"deltas"`
	Resyncs       int64 `json:"resyncs"`
	Dropped       int64 `json:"dropped"`
	Refused       int64 `json:"refused"`
	Flushes       int64 `json:"flushes"`
}

type subscriberView struct {
	Node           string `json:"node"`
	Subscriber     string `json:"subscriber"`
	Client         string `json:"client"`
	Session        string `json:"session"`
	ServicePorts   int32  `json:"servicePorts"`
	Deltas         int64  `json:"deltas"`
	Snapshots      int64  `json:"snapshots"`
	Resyncs        int64  `json:"resyncs"`
	Seq            uint64 `json:"seq"`
	Acked          uint64 `json:"acked"`
	Unacknowledged uint64 `json:"unacknowledged"`
	// LagSeconds is how long the subscriber has had messages
	// unacknowledged without catching up; 0 when it has acknowledged all.
	LagSeconds float64   `json:"lagSeconds"`
	Behind     bool      `json:"behind"`
	Subscribed time.Time `json:"subscribed"`
	LastAck    time.Time `json:"lastAck"`
}

// coreUI serves the page at /, its figures at /api/core and, as
// server-sent events whenever they change, at /api/core/events.
type coreUI struct {
	core    *remote.Core
	source  string
	started time.Time
	log     zerolog.Logger
	// stop ends the event streams when the core stops: a stream is a
	// request that never ends by itself, which a server's shutdown would
	// otherwise wait for.
	stop <-chan struct{}
}

func (u *coreUI) view(now time.Time, q coreQuery) (*coreView, error) {
	st, err := u.core.Stats(coreStatsTimeout)
	if err != nil {
		return nil, fmt.Errorf("ask the core for its subscriptions: %w", err)
	}
	c := u.core.Counters()
	v := &coreView{Address: u.core.Address(), Source: u.source, Started: u.started, Now: now,
		Counters: coreCountersView{Subscriptions: c.Subscriptions.Load(), Snapshots: c.Snapshots.Load(), Deltas: c.Deltas.Load(),
			Resyncs: c.Resyncs.Load(), Dropped: c.Dropped.Load(), Refused: c.Refused.Load(), Flushes: st.GetFlushes()},
		Subscribers: []subscriberView{}}
	v.page(st.GetSubscriptions(), now, q)
	return v, nil
}

// page fills in the summary of subs and the page of them q asks for.
func (v *coreView) page(subs []*messages.SubscriptionStats, now time.Time, q coreQuery) {
	var matched []subscriberView
	for _, s := range subs {
		sv := subscriberOf(s, now)
		v.Summary.add(sv)
		if q.matches(sv) {
			matched = append(matched, sv)
		}
	}
	slices.SortFunc(matched, func(a, b subscriberView) int {
		return strings.Compare(a.Node+"\x00"+a.Subscriber, b.Node+"\x00"+b.Subscriber)
	})
	v.Matched = len(matched)
	v.Offset = min(q.offset, len(matched))
	v.Subscribers = append(v.Subscribers, matched[v.Offset:min(len(matched), v.Offset+q.limit)]...)
}

func (s *coreSummary) add(v subscriberView) {
	switch {
	case v.Behind:
		s.Behind++
	case v.Unacknowledged > 0:
		s.Applying++
	default:
		s.InSync++
	}
	if v.LagSeconds > s.MaxLagSeconds {
		s.MaxLagSeconds, s.MaxLagNode = v.LagSeconds, v.Node
	}
}

func subscriberOf(s *messages.SubscriptionStats, now time.Time) subscriberView {
	v := subscriberView{Node: s.GetNodeName(), Subscriber: s.GetSubscriber(), Client: s.GetClient(), Session: s.GetSession(),
		ServicePorts: s.GetServicePorts(), Deltas: s.GetDeltas(), Snapshots: s.GetSnapshots(), Resyncs: s.GetResyncs(),
		Seq: s.GetSeq(), Acked: s.GetAcked(), Behind: s.GetBehind(),
		Subscribed: time.Unix(0, s.GetSubscribedUnixNano()).UTC(), LastAck: time.Unix(0, s.GetLastAckUnixNano()).UTC()}
	if s.GetSeq() > s.GetAcked() {
		v.Unacknowledged = s.GetSeq() - s.GetAcked()
	}
	if since := s.GetUnackedSinceUnixNano(); since != 0 {
		v.LagSeconds = max(0, now.Sub(time.Unix(0, since)).Seconds())
	}
	return v
}

func (u *coreUI) handler(guardHost bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		w.Write(coreUIPage)
	})
	mux.HandleFunc("GET /api/core", func(w http.ResponseWriter, r *http.Request) {
		v, err := u.view(time.Now().UTC(), parseCoreQuery(r))
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, err)
			return
		}
		writeJSON(w, v)
	})
	mux.HandleFunc("GET /api/core/events", u.events)
	if !guardHost {
		return mux
	}
	return loopbackHostGuard(mux)
}

// events streams the view (the page the query asks for) as server-sent
// events: at once, then whenever a figure changed, until the client goes
// or the core stops.
func (u *coreUI) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		httpError(w, http.StatusInternalServerError, fmt.Errorf("streaming unsupported"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	q := parseCoreQuery(r)
	var last []byte
	tick := time.NewTicker(coreUIStreamPeriod)
	defer tick.Stop()
	for {
		now := time.Now().UTC()
		v, err := u.view(now, q)
		if err == nil {
			// Compare without the clock, so an idle core sends nothing.
			v.Now = time.Time{}
			cmp, _ := json.Marshal(v)
			if !bytes.Equal(cmp, last) {
				last = cmp
				v.Now = now
				data, _ := json.Marshal(v)
				fmt.Fprintf(w, "event: core\ndata: %s\n\n", data)
				flusher.Flush()
			}
		} else {
			u.log.Debug().Err(err).Msg("core page: no figures")
		}
		select {
		case <-r.Context().Done():
			return
		case <-u.stop:
			return
		case <-tick.C:
		}
	}
}

// loopbackHostGuard answers only requests whose Host names this server by
// a loopback name and its own port: a web page elsewhere cannot read the
// core's figures by pointing a name of its own at 127.0.0.1 (DNS
// rebinding).
func loopbackHostGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if local == nil || !loopbackHostFor(r.Host, local) {
			httpError(w, http.StatusForbidden, fmt.Errorf("host %q is not this page (DNS rebinding?)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func loopbackHostFor(host string, local net.Addr) bool {
	_, port, err := net.SplitHostPort(local.String())
	if err != nil {
		return false
	}
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != port {
		return false
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// serveCoreUI serves the core's page on addr until ctx ends.
func serveCoreUI(ctx context.Context, o watchOptions, core *remote.Core, log zerolog.Logger) {
	u := &coreUI{core: core, source: o.source, started: time.Now().UTC(), log: log, stop: ctx.Done()}
	loopback, _ := loopbackAddress("--ui-address", o.uiAddress)
	serveHTTP(ctx, "core page (/)", o.uiAddress, u.handler(loopback), log)
}
