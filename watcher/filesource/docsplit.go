package filesource

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// documentReader reads a file's YAML documents one by one, as
// utilyaml.YAMLReader does.
type documentReader interface {
	Read() ([]byte, error)
}

// newDocumentReader splits data into its documents. A file with a
// newline at its end and no carriage return is cut in place (docSplitter):
// YAMLReader copies every line into a buffer of its own per document, CPU
// and garbage that add up when starting thousands of service ports.
// The rest takes YAMLReader, which turns "\r\n" into "\n" and ends the last
// line with one.
func newDocumentReader(data []byte) documentReader {
	if len(data) > 0 && data[len(data)-1] != '\n' || bytes.IndexByte(data, '\r') >= 0 {
		return utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	}
	return &docSplitter{data: data}
}

// docSplitter returns what YAMLReader returns from the same data (every
// line ending in "\n", none in "\r"): a document ends at a line beginning
// with "---" followed by nothing but spaces or a comment, which is
// dropped; such a line before any other of a document is part of it;
// anything else after "---" is an error.
type docSplitter struct {
	data []byte
	pos  int
}

func (s *docSplitter) Read() ([]byte, error) {
	start := s.pos
	for s.pos < len(s.data) {
		at := s.pos
		end := at + bytes.IndexByte(s.data[at:], '\n') + 1
		line := s.data[at:end]
		if bytes.HasPrefix(line, []byte(separator)) {
			if trimmed := bytes.TrimSpace(line[len(separator):]); len(trimmed) > 0 && trimmed[0] != '#' {
				s.pos = end
				return nil, fmt.Errorf("invalid Yaml document separator: %s", trimmed) // YAMLReader's words
			}
			if at > start {
				s.pos = end
				return s.data[start:at], nil
			}
		}
		s.pos = end
	}
	if s.pos > start {
		return s.data[start:s.pos], nil
	}
	return nil, io.EOF
}

const separator = "---"
