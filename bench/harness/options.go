package harness

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// loadModes are the ports scenario's load modes, in the order it runs them.
var loadModes = []string{ModeKeepAlive, ModeConn, ModeClose, ModeUDP, ModeBulk}

// Scenarios, in the order `all` runs them.
var Scenarios = []string{"startup", "ports", "churn", "chaos", ScenarioClientAddress}

// ScenarioClientAddress measures, through a kernel portal in network
// namespaces, what handing the client's address to the endpoint costs.
const ScenarioClientAddress = "client-address"

// Compare targets besides kproxy.
const (
	TargetKproxy  = "kproxy"
	TargetDirect  = "direct"
	TargetHAProxy = "haproxy"
	// TargetHAProxyTuned is HAProxy as its documentation tunes a TCP
	// forwarder: splice when it pays, no wake-up before the first data
	// on accept, the first data on the handshake's ACK on connect.
	TargetHAProxyTuned = "haproxy-tuned"
	// TargetHAProxyMinimal is HAProxy with the least configuration that
	// serves the ports: a frontend each, all sharing one backend. Startup
	// only (it starts on plain HAProxy's addresses, in turn with it).
	TargetHAProxyMinimal = "haproxy-minimal"
	TargetRelay          = "relay" // a bare Go UDP relay, the bar for UDP
	// TargetKernel is the kernel's own forwarding (nftables DNAT), the
	// limit; root only.
	TargetKernel = "kernel"
	// TargetNginx is nginx's stream proxy in UDP mode, a peer for UDP.
	TargetNginx    = "nginx"
	TargetBaseline = "baseline" // another kproxy binary, e.g. a build of main
)

// How the churn's changes reach kproxy (Options.ChurnVia).
const (
	ChurnFile   = "file"
	ChurnRemote = "remote"
)

// Options configure a run. The zero value of a field means its default
// (Defaults fills them in).
type Options struct {
	Kproxy     string   `json:"kproxy"`               // the kproxy binary under test
	KproxyArgs []string `json:"kproxyArgs,omitempty"` // more `kproxy run` flags
	KproxyEnv  []string `json:"-"`                    // more environment for it
	HAProxy    string   `json:"haproxy,omitempty"`    // the haproxy binary, when compared
	// Nginx is the nginx binary: the UDP peer (target nginx) and the close
	// mode's HTTP server (Go's net/http without it).
	Nginx string `json:"nginx,omitempty"`
	// Baseline is the kproxy binary the one under test is compared with
	// (target baseline), run with the same KproxyArgs on its own addresses.
	Baseline string   `json:"baseline,omitempty"`
	Compare  []string `json:"compare,omitempty"` // direct, kernel, haproxy, haproxy-tuned, nginx, relay, baseline
	// Relay is the binary whose `relay FILE` command runs the UDP relay:
	// the harness's own (kproxy-bench).
	Relay string `json:"-"`

	Ports     int `json:"ports"`     // N service ports
	Endpoints int `json:"endpoints"` // M endpoints (backends) each
	Clients   int `json:"clients"`   // C concurrent clients
	// ClientSweep: ports also runs each TCP mode again at each of these
	// concurrencies, its figures named for it ("conn, 256 clients: ...").
	ClientSweep []int         `json:"clientSweep,omitempty"`
	Modes       []string      `json:"modes"`    // keepalive, conn, close, udp, bulk
	Rounds      int           `json:"rounds"`   // interleaved rounds per target
	Duration    time.Duration `json:"duration"` // one round; the storm and the churn last as long
	Size        int           `json:"size"`     // request bytes
	PerConn     int           `json:"perConn"`  // keepalive and bulk: requests per connection
	// UDPBurst is how many datagrams a udp client sends before it reads
	// their echoes (1: one datagram and its echo at a time).
	UDPBurst int `json:"udpBurst,omitempty"`
	// UDPGSO sends each burst with UDP_SEGMENT (Linux), as QUIC stacks do.
	UDPGSO bool `json:"udpGSO,omitempty"`
	// MaxRequests bounds one round by count as Duration does by time.
	MaxRequests int64 `json:"maxRequests"`

	Services   int      `json:"services"`   // churn: S services
	ChurnRate  float64  `json:"churnRate"`  // churn: endpoint updates per second
	LoadRate   float64  `json:"loadRate"`   // churn and chaos: background requests per second, 0 unpaced
	ChaosRate  float64  `json:"chaosRate"`  // chaos: crashes per second
	ChaosKinds []string `json:"chaosKinds"` // chaos: actor kinds
	Seed       uint64   `json:"seed"`

	// ChurnSource, when set, holds the churn scenario's services instead
	// of manifest files (a test's real API server).
	ChurnSource ChurnSource `json:"-"`
	// ChurnVia is how the churn's changes reach kproxy: ChurnFile (its
	// own file source, manifests rewritten) or ChurnRemote (a core the
	// harness runs and feeds directly; kproxy run follows it over
	// remoting).
	ChurnVia string `json:"churnVia,omitempty"`
	// CoreMinSyncPeriod is the remote churn's core's --min-sync-period
	// (0: its default).
	CoreMinSyncPeriod time.Duration `json:"coreMinSyncPeriod,omitempty"`
	// ChurnProbers is how many clients probe the churn's pending changes
	// (0: churnProbersFor the rate).
	ChurnProbers int `json:"churnProbers,omitempty"`

	// IdleWait, when set, makes startup measure the sizes again once every
	// port has had no traffic for this long (an idle port), after the probes.
	IdleWait time.Duration `json:"idleWait,omitempty"`

	ReadyTimeout time.Duration `json:"readyTimeout"` // how long ports may take to forward
	WorkDir      string        `json:"-"`            // manifests, configs, logs
	Progress     io.Writer     `json:"-"`            // a terminal for the progress bar, or nil
	Log          io.Writer     `json:"-"`            // a line per step, or nil
}

// Defaults fills in zero fields.
func (o *Options) Defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Ports, 100)
	def(&o.Endpoints, 2)
	def(&o.Clients, 16)
	def(&o.Rounds, 3)
	def(&o.Size, 64)
	def(&o.PerConn, 100)
	def(&o.UDPBurst, 1)
	def(&o.Services, o.Ports)
	if o.MaxRequests == 0 {
		o.MaxRequests = 10_000_000
	}
	if len(o.Modes) == 0 {
		o.Modes = slices.Clone(loadModes)
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.ChurnRate == 0 {
		o.ChurnRate = 20
	}
	if o.LoadRate == 0 {
		o.LoadRate = 1000
	}
	if o.ChaosRate == 0 {
		o.ChaosRate = 20
	}
	if o.ChurnVia == "" {
		o.ChurnVia = ChurnFile
	}
	if len(o.ChaosKinds) == 0 {
		o.ChaosKinds = []string{"portal"}
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
}

// Validate checks the options after Defaults.
func (o *Options) Validate() error {
	if o.Kproxy == "" {
		return errors.New("no kproxy binary")
	}
	if o.WorkDir == "" {
		return errors.New("no work directory")
	}
	if o.Ports < 1 || o.Ports > maxPorts || o.Services < 1 || o.Services > maxPorts {
		return fmt.Errorf("ports %d, services %d: want 1 to %d", o.Ports, o.Services, maxPorts)
	}
	if o.Endpoints < 1 || o.Endpoints > 250 {
		return fmt.Errorf("endpoints %d: want 1 to 250", o.Endpoints)
	}
	if o.UDPBurst < 1 || o.UDPBurst > maxUDPBurst {
		return fmt.Errorf("udp burst %d: want 1 to %d", o.UDPBurst, maxUDPBurst)
	}
	for _, c := range o.ClientSweep {
		if c < 1 {
			return fmt.Errorf("--sweep-clients %d: must be positive", c)
		}
	}
	if o.Clients < 1 || o.Rounds < 1 || o.Size < 1 || o.PerConn < 1 || o.MaxRequests < 1 {
		return errors.New("clients, rounds, size, requests per connection and max requests must be positive")
	}
	if o.Duration <= 0 || o.ChurnRate <= 0 || o.ChaosRate <= 0 || o.LoadRate < 0 {
		return errors.New("duration and rates must be positive")
	}
	if o.ChurnVia != ChurnFile && o.ChurnVia != ChurnRemote {
		return fmt.Errorf("churn via %q: want %s or %s", o.ChurnVia, ChurnFile, ChurnRemote)
	}
	for _, m := range o.Modes {
		if !slices.Contains(loadModes, m) {
			return fmt.Errorf("mode %q: want keepalive, conn, close, udp or bulk", m)
		}
	}
	for _, c := range o.Compare {
		switch c {
		case TargetDirect:
		case TargetKernel:
		case TargetNginx:
			if o.Nginx == "" {
				return errors.New("--compare nginx: no nginx binary")
			}
		case TargetRelay:
			if o.Relay == "" {
				return errors.New("--compare relay: no binary to run the relay")
			}
		case TargetHAProxy, TargetHAProxyTuned, TargetHAProxyMinimal:
			if o.HAProxy == "" {
				return fmt.Errorf("--compare %s: no haproxy binary", c)
			}
		case TargetBaseline:
			if o.Baseline == "" {
				return errors.New("--compare baseline: no baseline kproxy binary (--baseline-kproxy)")
			}
		default:
			return fmt.Errorf("compare %q: want direct, kernel, haproxy, haproxy-tuned, haproxy-minimal, nginx, relay or baseline", c)
		}
	}
	return nil
}

func (o *Options) compares(t string) bool { return slices.Contains(o.Compare, t) }

func (o *Options) hasMode(m string) bool { return slices.Contains(o.Modes, m) }
