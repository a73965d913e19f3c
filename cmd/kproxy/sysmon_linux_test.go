package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kproxy run executes itself again, same pid and name, with
// sysmonSetting added to GODEBUG (other settings kept); a schedtrace the
// operator set is left as it is, with no second exec.
func TestRunRunsWithSysmonSetting(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ godebug, want string }{
		{"", sysmonSetting},
		{"madvdontneed=1", "madvdontneed=1," + sysmonSetting},
		{"schedtrace=0", "schedtrace=0"},
	} {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GODEBUG=") {
				env = append(env, kv)
			}
		}
		env = append(env, asKproxyMainEnv+"=1")
		if tc.godebug != "" {
			env = append(env, "GODEBUG="+tc.godebug)
		}
		cmd := exec.Command(exe, "run", "--source", "file:"+t.TempDir(), "--portal", "bind", "--bind-address", "127.0.0.1",
			"--node-name", "node", "--healthz-bind-address", "", "--metrics-bind-address", "", "--proxy-ports-file", "", "--log-format", "json")
		cmd.Env = env
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// "starting kproxy" is logged by the process that serves: after
		// the exec, if there is one.
		started := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			found := false
			for sc.Scan() {
				if !found && strings.Contains(sc.Text(), `"starting kproxy"`) {
					found = true
					started <- true
				}
			}
			if !found {
				started <- false
			}
		}()
		select {
		case ok := <-started:
			if !ok {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("GODEBUG %q: kproxy exited before it logged starting kproxy", tc.godebug)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("GODEBUG %q: kproxy did not log starting kproxy within 30s", tc.godebug)
		}
		environ, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
		comm, commErr := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), "GODEBUG="); ok {
				got = append(got, v)
			}
		}
		// ps, top and pgrep show the binary's name, not the re-exec's
		// path (/proc/self/exe).
		wantComm := filepath.Base(exe)
		if len(wantComm) > 15 {
			wantComm = wantComm[:15]
		}
		if commErr != nil || strings.TrimSpace(string(comm)) != wantComm {
			t.Errorf("GODEBUG %q: the serving process is named %q (%v), want %q", tc.godebug, comm, commErr, wantComm)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("GODEBUG %q: the serving process (pid %d) runs with GODEBUG %q, want [%q]", tc.godebug, cmd.Process.Pid, got, tc.want)
		}
	}
}
