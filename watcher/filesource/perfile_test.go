package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kproxy/kproxy/test/modeltest"
)

// keepRewriting rewrites path in place with content until the test ends
// (or for twice waitTimeout at most), as a generator that never stops
// does: truncated, half written, a pause of a few ms (the writer's pace),
// the rest, and again at once, so the file is never quiet for as long as
// fileSettle. Unless holdOpen, it is closed after each rewrite (only for
// moments); holdOpen keeps it open for writing throughout.
func keepRewriting(t *testing.T, path, content string, holdOpen bool) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	var held *os.File
	if holdOpen {
		var err error
		if held, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			t.Fatal(err)
		}
	}
	rewrite := func() error {
		f := held
		if f == nil {
			var err error
			if f, err = os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
				return err
			}
			defer f.Close()
		} else if err := f.Truncate(0); err != nil {
			return err
		}
		half := len(content) / 2
		if _, err := f.WriteAt([]byte(content[:half]), 0); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
		_, err := f.WriteAt([]byte(content[half:]), int64(half))
		return err
	}
	go func() {
		defer close(done)
		if held != nil {
			defer held.Close()
		}
		for end := time.Now().Add(2 * waitTimeout); time.Now().Before(end); {
			select {
			case <-stop:
				return
			default:
			}
			if err := rewrite(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// nextWith waits for a result holding key, checking that every result
// until then holds all of always (a half-written file would lose them).
func (rs *runningSource) nextWith(t *testing.T, key string, always ...string) *Result {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case r := <-rs.results:
			got := modeltest.KeyIDs(r.ServicePorts)
			for _, k := range always {
				if !slices.Contains(got, k) {
					t.Fatalf("result without %s (a half-written file applied?): %v", k, got)
				}
			}
			if slices.Contains(got, key) {
				return r
			}
		case <-deadline:
			t.Fatalf("%s not applied within %v", key, waitTimeout)
			return nil
		}
	}
}

// A change to one file is applied while another file of the directory is
// rewritten continuously, by a writer that closes it after each rewrite
// or one that holds it open: a file waits only for its own writer, not for
// the directory to be quiet. The busy file is never applied half written.
func TestFileSourceAppliesAFileWhileAnotherKeepsChanging(t *testing.T) {
	for _, holdOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("holdOpen=%v", holdOpen), func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "a.yaml", serviceYAML("web"))
			busy := serviceYAML("busy") + "---\n" + serviceYAML("busy2")
			writeFile(t, dir, "b.yaml", busy)
			rs := startSource(t, dir)
			assertKeys(t, rs.next(t), "default/busy2:/TCP", "default/busy:/TCP", "default/web:/TCP")

			keepRewriting(t, filepath.Join(dir, "b.yaml"), busy, holdOpen)
			rs.pollsFor(t, 3*fileSettle) // the writer is well under way
			writeFile(t, dir, "a.yaml", serviceYAML("api"))
			rs.nextWith(t, "default/api:/TCP", "default/busy:/TCP", "default/busy2:/TCP")
		})
	}
}

// A writer holding one file open does not hold back another file's
// change for the writer-hold limit: that file is applied at once, the
// held one only once its writer closes it.
func TestFileSourceAppliesAFileWhileAnotherIsHeldOpen(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", serviceYAML("web"))
	held := writeFile(t, dir, "b.yaml", serviceYAML("db"))
	rs := startSource(t, dir) // the default hold limit, longer than waitTimeout
	assertKeys(t, rs.next(t), "default/db:/TCP", "default/web:/TCP")

	f, err := os.OpenFile(held, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(serviceYAML("cache")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "a.yaml", serviceYAML("api"))
	assertKeys(t, rs.next(t), "default/api:/TCP", "default/db:/TCP")
	f.Close()
	assertKeys(t, rs.next(t), "default/api:/TCP", "default/cache:/TCP")
}

// decodeCounter counts the files a source decodes, by name.
type decodeCounter struct {
	mu    sync.Mutex
	names []string
}

func (c *decodeCounter) hook(s *FileSource) {
	s.decodedFile = func(name string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.names = append(c.names, filepath.Base(name))
	}
}

// take returns the names decoded since the last take, sorted.
func (c *decodeCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	slices.Sort(out)
	return out
}

// Changing one of N files decodes that file only, the others' services
// stay; a touch decodes nothing; a deleted file drops its services,
// decoding nothing.
func TestFileSourceDecodesOnlyChangedFiles(t *testing.T) {
	const n = 5
	dir := t.TempDir()
	var all, names []string
	for i := range n {
		names = append(names, fmt.Sprintf("f%d.yaml", i))
		writeFile(t, dir, names[i], serviceYAML(fmt.Sprintf("s%d", i)))
		all = append(all, fmt.Sprintf("default/s%d:/TCP", i))
	}
	var c decodeCounter
	rs := startSource(t, dir, c.hook)
	assertKeys(t, rs.next(t), all...)
	if got := c.take(); !slices.Equal(got, names) {
		t.Fatalf("first load decoded %v, want %v", got, names)
	}

	writeFile(t, dir, "f2.yaml", serviceYAML("changed"))
	want := slices.Clone(all)
	want[2] = "default/changed:/TCP"
	slices.Sort(want)
	assertKeys(t, rs.next(t), want...)
	if got := c.take(); !slices.Equal(got, []string{"f2.yaml"}) {
		t.Fatalf("changing f2.yaml decoded %v, want [f2.yaml]", got)
	}

	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "f3.yaml"), later, later); err != nil {
		t.Fatal(err)
	}
	rs.waitPolls(t, 2)
	rs.assertQuiet(t)
	if got := c.take(); len(got) != 0 {
		t.Fatalf("a touch decoded %v, want nothing", got)
	}

	if err := os.Remove(filepath.Join(dir, "f0.yaml")); err != nil {
		t.Fatal(err)
	}
	assertKeys(t, rs.next(t), slices.DeleteFunc(want, func(k string) bool { return k == "default/s0:/TCP" })...)
	if got := c.take(); len(got) != 0 {
		t.Fatalf("deleting a file decoded %v, want nothing", got)
	}
}

func sliceYAML(service, ip string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: " + service + "-1, labels: {kubernetes.io/service-name: " + service + "}}\n" +
		"addressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [\"" + ip + "\"]}]\n"
}

func endpointsOf(t *testing.T, r *Result, id string) []string {
	t.Helper()
	for _, p := range r.ServicePorts {
		if p.GetServicePort().GetKey().ID() == id {
			return modeltest.DescribeEndpoints(p.GetEndpoints())
		}
	}
	t.Fatalf("no %s in %v", id, modeltest.KeyIDs(r.ServicePorts))
	return nil
}

// A service is built from the decoded objects of every file: when only
// the file of its EndpointSlice changes, the service is built again with
// the new endpoints; a bad slice in an unchanged file is still reported
// with every result.
func TestFileSourceRebuildsAServiceWhenAnotherFileChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a-svc.yaml", serviceYAML("web"))
	writeFile(t, dir, "b-eps.yaml", sliceYAML("web", "10.1.0.1"))
	writeFile(t, dir, "c-bad.yaml", serviceYAML("db")+"---\n"+strings.Replace(sliceYAML("db", "10.2.0.1"), "8080", "0", 1))
	rs := startSource(t, dir)
	r := rs.next(t)
	if got := endpointsOf(t, r, "default/web:/TCP"); !slices.Equal(got, []string{"10.1.0.1:8080[ready,serving,internal,external]"}) {
		t.Fatalf("endpoints = %v", got)
	}
	if len(r.Errors) != 1 {
		t.Fatalf("errors = %v, want the bad slice's", r.Errors)
	}

	writeFile(t, dir, "b-eps.yaml", sliceYAML("web", "10.1.0.2"))
	r = rs.next(t)
	if got := endpointsOf(t, r, "default/web:/TCP"); !slices.Equal(got, []string{"10.1.0.2:8080[ready,serving,internal,external]"}) {
		t.Fatalf("after the slice's file changed, endpoints = %v", got)
	}
	if len(r.Errors) != 1 || !slices.Contains(r.Retain, "default/db") {
		t.Fatalf("errors = %v, retain = %v: the unchanged bad slice must still be reported", r.Errors, r.Retain)
	}

	if err := os.Remove(filepath.Join(dir, "b-eps.yaml")); err != nil {
		t.Fatal(err)
	}
	if got := endpointsOf(t, rs.next(t), "default/web:/TCP"); len(got) != 0 {
		t.Fatalf("after the slice's file was deleted, endpoints = %v", got)
	}
}
