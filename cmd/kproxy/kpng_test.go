package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// kpngExampleLine is what KPNG's kpng-json prints for
// testdata/kpng-example.yaml (KPNG's specialized-proxier example).
const kpngExampleLine = `{"Service":{"Namespace":"default","Name":"kpng-example","Type":"ClusterIP",
  "IPs":{"ClusterIPs":{},"ExternalIPs":{"V4":["10.0.0.55"],"V6":["1000::55"]},"Headless":true},
  "Ports":[{"Protocol":1,"Port":6000,"TargetPort":6000}]},
 "Endpoints":[{"IPs":{"V6":["1100::202"]},"Local":true},{"IPs":{"V4":["11.0.2.2"]},"Local":true},
  {"IPs":{"V4":["11.0.1.2"]}},{"IPs":{"V6":["1100::102"]}}]}`

// normalized decodes a kpng-json line with its endpoints in a fixed order.
func normalized(t *testing.T, line string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	eps, _ := v["Endpoints"].([]any)
	sort.Slice(eps, func(i, j int) bool { return fmt.Sprint(eps[i]) < fmt.Sprint(eps[j]) })
	return v
}

// kproxy watch --json, for a named proxier, prints KPNG's kpng-json line
// field for field for KPNG's headless example, so jq scripts written for
// KPNG work unchanged.
func TestWatchJSONIsKPNGsForAHeadlessNamedProxierService(t *testing.T) {
	src := sourceFlags{source: "file:testdata/kpng-example.yaml", nodeName: "node-a", serviceProxyName: "kpng-example",
		filePollInterval: time.Hour, minSyncPeriod: time.Millisecond}
	out := strings.TrimSpace(runWatch(t, watchOptions{sourceFlags: src, json: true}))
	if strings.Count(out, "\n") != 0 {
		t.Fatalf("want one line, got:\n%s", out)
	}
	if got, want := normalized(t, out), normalized(t, kpngExampleLine); !reflect.DeepEqual(got, want) {
		t.Fatalf("kproxy watch --json:\n%s\nwant KPNG's:\n%s", out, kpngExampleLine)
	}

	for expr, want := range map[string]string{
		`.Service.IPs.ExternalIPs.V6[0]`:                                         "1000::55",
		`.Endpoints[]|select(.Local == true)|select(.IPs.V6 != null)|.IPs.V6[0]`: "1100::202",
	} {
		cmd := exec.Command("jq", "-r", expr)
		cmd.Stdin = strings.NewReader(out)
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("jq -r %q: %v (apt-get install jq)", expr, err)
		}
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("jq -r %q = %q, want %q", expr, got, want)
		}
	}

	// Without --service-proxy-name the service is skipped, as kube-proxy does.
	src.serviceProxyName = ""
	if out := strings.TrimSpace(runWatch(t, watchOptions{sourceFlags: src, json: true})); out != "" {
		t.Fatalf("without --service-proxy-name: %s, want nothing", out)
	}
}
