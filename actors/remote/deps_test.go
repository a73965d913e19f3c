package remote

import (
	"os/exec"
	"strings"
	"testing"
)

// A core needs the sources and the messages, not the node proxy: this
// package and its tests depend on none of the node proxy's tree, data path
// or balancing.
func TestRemoteDoesNotDependOnNodeProxy(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-test", "-f", "{{.ImportPath}}", "github.com/kproxy/kproxy/actors/remote").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := map[string]bool{
		"github.com/kproxy/kproxy/actors":          true,
		"github.com/kproxy/kproxy/portal/datapath": true,
		"github.com/kproxy/kproxy/balancer":        true,
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// Test variants read "path [path.test]".
		if path, _, _ := strings.Cut(line, " "); forbidden[path] {
			t.Errorf("actors/remote depends on %s", path)
		}
	}
}
