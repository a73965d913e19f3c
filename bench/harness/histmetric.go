package harness

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// bucket is one cumulative bucket of a Prometheus histogram.
type bucket struct {
	le    float64
	count float64
}

// scrapeHistogram reads the buckets of a histogram (without labels
// besides le) from the process's /metrics.
func (p *Proc) scrapeHistogram(ctx context.Context, client *http.Client, name string) ([]bucket, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s metrics: %w", p.Name, err)
	}
	defer resp.Body.Close()
	var out []bucket
	prefix := name + `_bucket{le="`
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, _, _ := strings.Cut(rest, `"`)
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as infinity
		if err != nil {
			continue
		}
		out = append(out, bucket{le: bound, count: metricValue(sc.Text())})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s metrics: %w", p.Name, err)
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	return out, nil
}

// bucketQuantile is the upper bound of the bucket holding quantile q (0
// to 1), as Prometheus's histogram_quantile would bound it; NaN without
// observations, +Inf past the last finite bucket.
func bucketQuantile(bs []bucket, q float64) float64 {
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].count
	for _, b := range bs {
		if b.count >= rank {
			return b.le
		}
	}
	return math.Inf(1)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
