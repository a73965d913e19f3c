package rules

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// dataPath is the package the kernel rules must build without: they share
// with it only portal/steer.
const dataPath = "github.com/kproxy/kproxy/portal/datapath"

// The rules packages and their tests, on Linux and on Windows (netsh), do
// not depend on the data path.
func TestRulesDoNotDependOnDataPath(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	for _, goos := range []string{"linux", "windows"} {
		cmd := exec.Command(goBin, "list", "-deps", "-test", "-f", "{{.ImportPath}}", "github.com/kproxy/kproxy/portal/rules/...")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go list: %v", goos, err)
		}
		// Test variants read "path [path.test]".
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if path, _, _ := strings.Cut(line, " "); path == dataPath {
				t.Errorf("GOOS=%s: the portal rules depend on the data path %s; share through portal/steer instead", goos, dataPath)
				break
			}
		}
	}
}
