package filesource

import (
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A file complete but still open for writing is not read, however long
// past the settle time; it is read as soon as its writer closes it.
func TestFileSourceWaitsForTheWriterToClose(t *testing.T) {
	path := writeFile(t, t.TempDir(), "svc.yaml", serviceYAML("web"))
	rs := startSource(t, path)
	assertKeys(t, rs.next(t), "default/web:/TCP")

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(serviceYAML("api")); err != nil {
		t.Fatal(err)
	}
	rs.pollsFor(t, 3*fileSettle)
	rs.assertQuiet(t)
	f.Close()
	assertKeys(t, rs.next(t), "default/api:/TCP")
}

// A writer that keeps the file open for good does not freeze the source:
// once unchanged for the hold limit, the file is read, with a warning.
func TestFileSourceReadsAFileHeldOpenPastTheLimit(t *testing.T) {
	path := writeFile(t, t.TempDir(), "svc.yaml", serviceYAML("web"))
	var logs lockedBuffer
	const hold = 500 * time.Millisecond
	rs := startSource(t, path, func(s *FileSource) { s.writerHold, s.log = hold, zerolog.New(&logs) })
	assertKeys(t, rs.next(t), "default/web:/TCP")

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	written := time.Now()
	if _, err := f.WriteString(serviceYAML("api")); err != nil {
		t.Fatal(err)
	}
	assertKeys(t, rs.next(t), "default/api:/TCP")
	if waited := time.Since(written); waited < hold {
		t.Errorf("read %v after the write, before the hold limit %v", waited, hold)
	}
	if logs.count("still open for writing") != 1 {
		t.Error("reading a file still open for writing was not warned about once")
	}
}
