package liveview

import (
	"time"

	"github.com/kproxy/kproxy/messages"
)

// maxRowEndpoints bounds the endpoints one row lists (a service with
// thousands of endpoints would make a page of 50 rows megabytes).
const maxRowEndpoints = 100

// Row is one service port as the page shows it.
type Row struct {
	ID              string     `json:"id"`
	Generation      int64      `json:"generation"`
	SessionAffinity string     `json:"sessionAffinity"`
	ProxyPort       int32      `json:"proxyPort,omitempty"`
	Listen          []string   `json:"listen"`
	Error           string     `json:"error,omitempty"`
	Actors          []Actor    `json:"actors"` // serviceport, portal, balancer, affinity (ClientIP only)
	Endpoints       []Endpoint `json:"endpoints"`
	EndpointsTotal  int        `json:"endpointsTotal"`
	Traffic         Traffic    `json:"traffic"`
}

// Endpoint is one endpoint of a row.
type Endpoint struct {
	Address     string `json:"address"`
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating,omitempty"`
	Local       bool   `json:"local,omitempty"`
	Node        string `json:"node,omitempty"`
	// EjectedUntil is set while outlier detection skips the endpoint.
	EjectedUntil *time.Time `json:"ejectedUntil,omitempty"`
	Ejections    int32      `json:"ejections,omitempty"`
}

// Traffic is a service port's counters (datapath.Stats).
type Traffic struct {
	ActiveConns     int64 `json:"activeConns"`
	Conns           int64 `json:"conns"`
	BytesToEndpoint int64 `json:"bytesToEndpoint"`
	BytesToClient   int64 `json:"bytesToClient"`
	DialFailures    int64 `json:"dialFailures"`
	ActiveFlows     int64 `json:"activeFlows"`
	Flows           int64 `json:"flows"`
}

// row builds the row of service port id; m.mu is held.
func (m *model) row(id string) *Row {
	st := m.ports[id]
	sp := st.GetServicePort()
	r := &Row{ID: id, Generation: st.GetGeneration(), SessionAffinity: sp.GetSessionAffinity().String(),
		ProxyPort: st.GetProxyPort(), Listen: st.GetListenAddresses(), Error: st.GetError(),
		EndpointsTotal: len(st.GetEndpoints()), Endpoints: []Endpoint{}}
	if r.Listen == nil {
		r.Listen = []string{}
	}
	actorID := st.GetActorId()
	roles := []string{roleServicePort, rolePortal, roleBalancer}
	if sp.GetSessionAffinity() == messages.SessionAffinity_CLIENT_IP {
		roles = append(roles, roleAffinity)
	}
	for _, role := range roles {
		pid := actorID
		if role != roleServicePort {
			pid += "/" + role
		}
		a := m.actors[pid].view(role, pid)
		if a.Status == statusRunning && len(st.GetFailures()) > 0 && (role == rolePortal || role == roleServicePort) {
			a.Status = statusFailing
		}
		r.Actors = append(r.Actors, a)
	}
	ejected := map[string]*messages.EjectedEndpoint{}
	for _, e := range st.GetEjected() {
		ejected[e.GetEndpoint()] = e
	}
	for i, e := range st.GetEndpoints() {
		if i == maxRowEndpoints {
			break
		}
		ep := Endpoint{Address: e.Address(), Ready: e.GetReady(), Serving: e.GetServing(), Terminating: e.GetTerminating(),
			Local: e.GetLocal(), Node: e.GetNodeName()}
		if ej := ejected[ep.Address]; ej != nil {
			until := time.UnixMilli(ej.GetUntilUnixMilli())
			ep.EjectedUntil, ep.Ejections = &until, ej.GetEjections()
		}
		r.Endpoints = append(r.Endpoints, ep)
	}
	if s := m.stats.Get(id); s != nil {
		r.Traffic = Traffic{ActiveConns: s.ActiveConns.Load(), Conns: s.Conns.Load(), BytesToEndpoint: s.BytesToEndpoint.Load(),
			BytesToClient: s.BytesToClient.Load(), DialFailures: s.DialFailures.Load(), ActiveFlows: s.ActiveFlows.Load(), Flows: s.Flows.Load()}
	}
	return r
}
