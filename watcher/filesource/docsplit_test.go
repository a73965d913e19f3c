package filesource

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var docSplitSeeds = []string{
	"",
	"\n",
	"a: 1\n",
	"a: 1\n---\nb: 2\n",
	"---\na: 1\n---\nb: 2\n---\n",
	"---\n---\na: 1\n",
	"a: 1\n--- # comment\nb: 2\n",
	"a: 1\n---   \n\n---\nb: 2\n",
	"a: 1\n--- b: 2\nc: 3\n",
	"a: 1\n----\nb: 2\n",
	"a: |\n  ---\n  x\n---\nb: 2\n",
	"a: 1\n---\tx\n",
	"a: 1\r\n---\r\nb: 2\r\n",
	"a: 1\n---\nb: 2",
	"\n\n---\n\n",
}

// The documents are those YAMLReader reads: the same bytes, the same
// error at the same point.
func FuzzDocumentReader(f *testing.F) {
	for _, s := range docSplitSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := newDocumentReader(data), utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			g, gerr := got.Read()
			w, werr := want.Read()
			if !bytes.Equal(g, w) || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
				t.Fatalf("%q document %d: %q, %v; YAMLReader %q, %v", data, i+1, g, gerr, w, werr)
			}
			if gerr != nil {
				if errors.Is(gerr, io.EOF) != errors.Is(werr, io.EOF) {
					t.Fatalf("%q document %d: %v; YAMLReader %v", data, i+1, gerr, werr)
				}
				return // the file source stops at the first error
			}
		}
	})
}

// A plain file is cut in place, not copied.
func TestDocumentReaderInPlace(t *testing.T) {
	data := []byte("a: 1\n---\nb: 2\n")
	r := newDocumentReader(data)
	if _, ok := r.(*docSplitter); !ok {
		t.Fatalf("%T, want the in-place splitter", r)
	}
	doc, err := r.Read()
	if err != nil || &doc[0] != &data[0] {
		t.Fatalf("first document %q, %v: not data's own bytes", doc, err)
	}
}
