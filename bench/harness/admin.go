package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// admin drives the kproxy under test's fault-injection API, as
// `kproxy chaos` does: the token from the file kproxy run wrote, JSON bodies.
type admin struct {
	base      string
	tokenFile string
	http      *http.Client
}

func newAdmin(addr, tokenFile string) *admin {
	return &admin{base: "http://" + addr, tokenFile: tokenFile, http: &http.Client{Timeout: 11 * time.Minute}}
}

// stormCrash is one crash a storm made (the admin API's answer).
type stormCrash struct {
	At          time.Time `json:"at"`
	ServicePort string    `json:"servicePort"`
	Actor       string    `json:"actor"`
}

// storm crashes actors of the given kinds at rate per second for d and
// returns the crashes it made, once it is over.
func (a *admin) storm(ctx context.Context, rate float64, d time.Duration, seed uint64, kinds []string) ([]stormCrash, error) {
	var out struct {
		Crashes []stormCrash `json:"crashes"`
	}
	body := map[string]any{"rate": rate, "duration": d.String(), "seed": seed, "kinds": kinds}
	if err := a.call(ctx, http.MethodPost, "/chaos", body, &out); err != nil {
		return nil, fmt.Errorf("chaos storm: %w", err)
	}
	return out.Crashes, nil
}

func (a *admin) call(ctx context.Context, method, path string, body, out any) error {
	raw, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(raw)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, out)
}
