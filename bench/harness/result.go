package harness

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Report is everything a run measured; --json writes it as it is.
type Report struct {
	Version string `json:"version"` // of the kproxy under test
	// BaselineVersion is the baseline kproxy's, when it was compared.
	BaselineVersion string            `json:"baselineVersion,omitempty"`
	Command         string            `json:"command"`
	Started         time.Time         `json:"started"`
	Host            Host              `json:"host"`
	Options         Options           `json:"options"`
	Scenarios       []*ScenarioResult `json:"scenarios"`
}

// Host describes the machine, since figures only compare within one.
type Host struct {
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel,omitempty"`
	FDMax  int64  `json:"fdLimit,omitempty"`
}

// ScenarioResult is one scenario's figures and the series behind them.
type ScenarioResult struct {
	Name     string         `json:"name"`
	Figures  []Figure       `json:"figures"`
	Rounds   []Round        `json:"rounds,omitempty"`
	Latency  []LatencyCurve `json:"latency,omitempty"`
	Ready    []ReadyCurve   `json:"ready,omitempty"`
	Timeline []Sample       `json:"timeline,omitempty"`
	Churn    *ChurnDetail   `json:"churn,omitempty"`
	Chaos    *ChaosDetail   `json:"chaos,omitempty"`
	// ClientAddress is what the client-address scenario's endpoints saw.
	ClientAddress *ClientAddressDetail `json:"clientAddress,omitempty"`
	Notes         []string             `json:"notes,omitempty"`
	// Goals are the scenario's targets, each with its verdict in this run
	// and the command that judges it.
	Goals []GoalResult `json:"goals,omitempty"`
	// Skipped says why the scenario measured nothing on this machine
	// (e.g. not root); it is not a failure.
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Figure is one row of the table: a value per target.
type Figure struct {
	Name          string             `json:"name"`
	Unit          string             `json:"unit"`
	Values        map[string]float64 `json:"values"`
	LowerIsBetter bool               `json:"lowerIsBetter,omitempty"`
	// Goals are the targets this figure is judged by (goals.go).
	Goals []GoalResult `json:"goals,omitempty"`
}

// Round is one target's load in one round.
type Round struct {
	Mode           string  `json:"mode"`
	Target         string  `json:"target"`
	Round          int     `json:"round"`
	Ops            int64   `json:"ops"`
	Errors         int64   `json:"errors"`
	Seconds        float64 `json:"seconds"`
	OpsPerSecond   float64 `json:"opsPerSecond"`
	CPUSeconds     float64 `json:"cpuSeconds,omitempty"` // of the proxy process, from /proc
	CPUMicrosPerOp float64 `json:"cpuMicrosPerOp,omitempty"`
	// MachineCPUMicrosPerOp is the whole machine's busy CPU time over the
	// round per operation: the proxy's, the kernel's work for it that no
	// process of its own is charged for, and the load's and backends'
	// (the same for every target: compare it between targets).
	MachineCPUMicrosPerOp float64  `json:"machineCpuMicrosPerOp,omitempty"`
	ErrSamples            []string `json:"errorSamples,omitempty"`
}

// LatencyCurve is a latency distribution at fixed percentiles.
type LatencyCurve struct {
	Target      string       `json:"target"`
	Mode        string       `json:"mode"`
	Count       int64        `json:"count"`
	Percentiles []Percentile `json:"percentiles"`
}

// Percentile is a latency at a percentile.
type Percentile struct {
	P      float64 `json:"p"`
	Micros int64   `json:"micros"`
}

// reportedPercentiles are the points of every latency curve.
var reportedPercentiles = []float64{50, 75, 90, 95, 99, 99.9, 99.99, 100}

func curve(target, mode string, h *hdrhistogram.Histogram) LatencyCurve {
	c := LatencyCurve{Target: target, Mode: mode, Count: h.TotalCount()}
	for _, p := range reportedPercentiles {
		c.Percentiles = append(c.Percentiles, Percentile{P: p, Micros: h.ValueAtQuantile(p)})
	}
	return c
}

// ReadyCurve is when each port of a target first listened or forwarded
// (sorted), from the process's start: ports up over time.
type ReadyCurve struct {
	Target  string    `json:"target"`
	Kind    string    `json:"kind"` // listening or forwarding
	Seconds []float64 `json:"seconds"`
}

// Sample is one tick of the timeline.
type Sample struct {
	T      float64              `json:"t"` // seconds since the scenario began
	Target string               `json:"target,omitempty"`
	Ops    int64                `json:"ops"` // cumulative
	Errors int64                `json:"errors"`
	Procs  map[string]ProcPoint `json:"procs,omitempty"`
}

// ProcPoint is one process's reading at a tick.
type ProcPoint struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	RSS        int64   `json:"rss"`
	AnonRSS    int64   `json:"anonRss,omitempty"` // of RSS: anonymous (procFigures only)
	FDs        int     `json:"fds"`
	Threads    int     `json:"threads"`
	Goroutines int64   `json:"goroutines,omitempty"`
	Restarts   int64   `json:"restarts,omitempty"`
}

// ChurnDetail is the churn scenario's change-to-applied latencies.
type ChurnDetail struct {
	Changes int `json:"changes"`
	// MadePerSecond is the rate of changes made (the asked rate, unless
	// the driver fell behind).
	MadePerSecond float64        `json:"madePerSecond"`
	Applied       int            `json:"applied"`
	Superseded    int            `json:"superseded"`
	NotApplied    int            `json:"notApplied"`
	Latency       LatencyCurve   `json:"latency"`
	Requests      int64          `json:"requests"`
	FailedReqs    int64          `json:"failedRequests"`
	ErrorSamples  []string       `json:"errorSamples,omitempty"`
	Source        string         `json:"source"`
	PerSecond     []ChurnSeconds `json:"perSecond,omitempty"`
}

// ChurnSeconds is one second of changes: how many and their worst latency.
type ChurnSeconds struct {
	Second int     `json:"second"`
	Max    float64 `json:"maxMillis"`
}

// ChaosDetail splits the chaos scenario's failures by whether the port was crashed.
type ChaosDetail struct {
	Crashes           int      `json:"crashes"`
	TopCrashes        int      `json:"topCrashes"` // watcher, proxier, rules: every port's
	CrashedPorts      int      `json:"crashedPorts"`
	UntouchedPorts    int      `json:"untouchedPorts"`
	RequestsCrashed   int64    `json:"requestsOnCrashedPorts"`
	FailedCrashed     int64    `json:"failedOnCrashedPorts"`
	RequestsUntouched int64    `json:"requestsOnUntouchedPorts"`
	FailedUntouched   int64    `json:"failedOnUntouchedPorts"`
	ErrorSamples      []string `json:"errorSamples,omitempty"`
}

// ClientAddressDetail is, per client-address mode, the connections its
// endpoint accepted by the client address it saw (the socket's peer, or
// the PROXY header's source).
type ClientAddressDetail struct {
	Client string                      `json:"client"` // the client's own address
	Node   string                      `json:"node"`   // the node's address toward the pod
	Seen   map[string]map[string]int64 `json:"seen"`
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
