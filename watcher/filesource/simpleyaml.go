package filesource

import (
	"bytes"
	"regexp"
)

// simpleYAMLToJSON converts a document written in a plain subset of YAML
// (the way manifests are usually written: block mappings and sequences
// indented with spaces, one-line flow mappings and sequences, plain and
// simply quoted scalars) to JSON, or returns false for anything else
// (comments, anchors, tags, multi-line scalars, escapes, tabs, non-ASCII,
// duplicate keys, scalars YAML 1.1 could read as something other than a
// string, an integer or true/false), which then takes the YAML parser.
// What it accepts, it converts exactly as sigs.k8s.io/yaml's
// YAMLToJSONStrict does (FuzzSimpleYAML checks it against it), at about
// a tenth of the CPU and garbage: the YAML parser would be most of the
// cost of loading thousands of services.
func simpleYAMLToJSON(doc []byte) ([]byte, bool) {
	js, _, ok := simpleYAMLDocument(doc)
	return js, ok
}

// simpleYAMLDocument is simpleYAMLToJSON that also returns the
// document's apiVersion and kind when they are plain scalars of its
// top-level mapping (empty otherwise), read from its lines.
func simpleYAMLDocument(doc []byte) (js []byte, t typeOf, ok bool) {
	p := simpleYAML{out: make([]byte, 0, len(doc)+len(doc)/4)}
	if !p.split(doc) || len(p.lines) == 0 || p.lines[0].indent != 0 {
		return nil, t, false
	}
	if !p.mapping(0) || p.next != len(p.lines) {
		return nil, t, false
	}
	for _, l := range p.lines {
		if l.indent != 0 {
			continue
		}
		if v, ok := bytes.CutPrefix(l.text, []byte("apiVersion: ")); ok {
			t.apiVersion = plainWord(v)
		} else if v, ok := bytes.CutPrefix(l.text, []byte("kind: ")); ok {
			t.kind = plainWord(v)
		}
	}
	return p.out, t, true
}

// typeOf is a document's apiVersion and kind.
type typeOf struct{ apiVersion, kind string }

// plainWord is v if it is one plain word of letters, digits, '.', '/'
// and '-' (an apiVersion or kind as written), else "": quoted or other
// scalars are left to the deserializer.
func plainWord(v []byte) string {
	v = bytes.TrimLeft(v, " ")
	if len(v) == 0 {
		return ""
	}
	for _, c := range v {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '/' || c == '-') {
			return ""
		}
	}
	return string(v)
}

type simpleLine struct {
	indent int
	text   []byte // without the indent; no trailing spaces
}

type simpleYAML struct {
	lines []simpleLine
	next  int // the first line not yet consumed
	out   []byte
}

// split cuts the document into its non-blank lines, refusing any byte
// outside printable ASCII, tabs and comments.
func (p *simpleYAML) split(doc []byte) bool {
	for len(doc) > 0 {
		line := doc
		if i := bytes.IndexByte(doc, '\n'); i >= 0 {
			line, doc = doc[:i], doc[i+1:]
		} else {
			doc = nil
		}
		for _, c := range line {
			if c < ' ' || c > '~' || c == '#' {
				return false
			}
		}
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		text := bytes.TrimRight(line[indent:], " ")
		if len(text) == 0 {
			continue
		}
		if bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("...")) {
			return false // a document marker: the YAML reader's business
		}
		p.lines = append(p.lines, simpleLine{indent, text})
	}
	return true
}

// isItem reports whether a line is a block sequence entry.
func isItem(text []byte) bool { return len(text) >= 2 && text[0] == '-' && text[1] == ' ' }

// mapping converts the block mapping whose keys are at indent, from the
// next line on.
func (p *simpleYAML) mapping(indent int) bool {
	var keys [32][]byte // for duplicate keys; a longer mapping takes the parser
	n := 0
	p.out = append(p.out, '{')
	for p.next < len(p.lines) {
		l := p.lines[p.next]
		if l.indent < indent || (l.indent == indent && isItem(l.text)) {
			break
		}
		if l.indent > indent {
			return false // a continuation line
		}
		colon := bytes.Index(l.text, []byte(": "))
		rest := []byte(nil)
		if colon < 0 {
			if l.text[len(l.text)-1] != ':' {
				return false
			}
			colon = len(l.text) - 1
		} else {
			rest = bytes.TrimLeft(l.text[colon+2:], " ")
		}
		key := l.text[:colon]
		if !plainKey(key) || n == len(keys) {
			return false
		}
		for _, k := range keys[:n] {
			if bytes.Equal(k, key) {
				return false
			}
		}
		keys[n] = key
		if n > 0 {
			p.out = append(p.out, ',')
		}
		n++
		p.out = append(p.out, '"')
		p.out = append(p.out, key...)
		p.out = append(p.out, '"', ':')
		p.next++
		if len(rest) > 0 {
			if !p.inline(rest) {
				return false
			}
			continue
		}
		// The value is on the lines below: deeper, or a sequence at the
		// key's own indent; nothing there is null.
		if p.next < len(p.lines) {
			d := p.lines[p.next]
			switch {
			case d.indent >= indent && isItem(d.text):
				if !p.sequence(d.indent) {
					return false
				}
				continue
			case d.indent > indent:
				if !p.mapping(d.indent) {
					return false
				}
				continue
			}
		}
		p.out = append(p.out, "null"...)
	}
	p.out = append(p.out, '}')
	return n > 0
}

// sequence converts the block sequence whose "- " are at indent.
func (p *simpleYAML) sequence(indent int) bool {
	p.out = append(p.out, '[')
	for i := 0; p.next < len(p.lines); i++ {
		l := p.lines[p.next]
		if l.indent < indent || (l.indent == indent && !isItem(l.text)) {
			break
		}
		if l.indent > indent {
			return false
		}
		if i > 0 {
			p.out = append(p.out, ',')
		}
		rest := bytes.TrimLeft(l.text[2:], " ")
		col := indent + len(l.text) - len(rest)
		switch {
		case len(rest) == 0 || isItem(rest) || rest[0] == '-':
			return false
		case rest[0] == '{' || rest[0] == '[' || rest[0] == '"' || rest[0] == '\'':
			p.next++
			if !p.inline(rest) {
				return false
			}
		case bytes.Contains(rest, []byte(": ")) || rest[len(rest)-1] == ':':
			// "- key: value": a mapping whose keys are at the column of
			// this first key, continuing on the lines below.
			p.lines[p.next] = simpleLine{col, rest}
			if !p.mapping(col) {
				return false
			}
		default:
			p.next++
			if !p.inline(rest) {
				return false
			}
		}
	}
	p.out = append(p.out, ']')
	return true
}

// inline converts a value that is all on one line: a flow collection, a
// quoted or a plain scalar.
func (p *simpleYAML) inline(text []byte) bool {
	if text[0] == '{' || text[0] == '[' {
		rest, ok := p.flow(text)
		return ok && len(rest) == 0
	}
	if text[0] == '"' || text[0] == '\'' {
		rest, ok := p.quoted(text)
		return ok && len(bytes.TrimLeft(rest, " ")) == 0
	}
	return p.plain(text)
}

// flow converts a flow mapping or sequence at the start of text and
// returns what follows it, spaces skipped.
func (p *simpleYAML) flow(text []byte) ([]byte, bool) {
	open := text[0]
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	p.out = append(p.out, open)
	text = bytes.TrimLeft(text[1:], " ")
	var keys [32][]byte
	for n := 0; ; n++ {
		if len(text) == 0 {
			return nil, false // continues on the next line
		}
		if text[0] == closer {
			p.out = append(p.out, closer)
			return bytes.TrimLeft(text[1:], " "), true
		}
		if n > 0 {
			if text[0] != ',' {
				return nil, false
			}
			text = bytes.TrimLeft(text[1:], " ")
			if len(text) == 0 || text[0] == closer || text[0] == ',' {
				return nil, false // "[a, ]": YAML allows it, but rarely meant
			}
			p.out = append(p.out, ',')
		}
		if open == '{' {
			colon := bytes.Index(text, []byte(": "))
			if colon < 0 {
				return nil, false
			}
			key := text[:colon]
			if !plainKey(key) || n == len(keys) {
				return nil, false
			}
			for _, k := range keys[:n] {
				if bytes.Equal(k, key) {
					return nil, false
				}
			}
			keys[n] = key
			p.out = append(p.out, '"')
			p.out = append(p.out, key...)
			p.out = append(p.out, '"', ':')
			text = bytes.TrimLeft(text[colon+2:], " ")
			if len(text) == 0 {
				return nil, false
			}
		}
		var ok bool
		switch text[0] {
		case '{', '[':
			text, ok = p.flow(text)
		case '"', '\'':
			text, ok = p.quoted(text)
			text = bytes.TrimLeft(text, " ")
		default:
			end := bytes.IndexAny(text, ",]}")
			if end < 0 {
				return nil, false
			}
			ok = p.plain(bytes.TrimRight(text[:end], " "))
			text = text[end:]
		}
		if !ok {
			return nil, false
		}
	}
}

// quoted converts a quoted scalar without escapes at the start of text
// and returns what follows it.
func (p *simpleYAML) quoted(text []byte) ([]byte, bool) {
	q := text[0]
	end := bytes.IndexByte(text[1:], q)
	if end < 0 {
		return nil, false
	}
	s, rest := text[1:1+end], text[2+end:]
	if q == '"' && bytes.IndexByte(s, '\\') >= 0 {
		return nil, false // an escape
	}
	if q == '\'' && len(rest) > 0 && rest[0] == '\'' {
		return nil, false // '' is a quote inside
	}
	p.out = append(p.out, '"')
	for _, c := range s {
		if c == '"' || c == '\\' {
			p.out = append(p.out, '\\')
		}
		p.out = append(p.out, c)
	}
	p.out = append(p.out, '"')
	return rest, true
}

var (
	// YAML 1.1's words for booleans and null (go-yaml v2's table): as
	// plain scalars they are not strings.
	yamlWords = map[string]bool{
		"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
		"n": true, "N": true, "no": true, "No": true, "NO": true, "off": true, "Off": true, "OFF": true,
		"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
		"null": true, "Null": true, "NULL": true,
	}
	plainInt    = regexp.MustCompile(`^(0|-?[1-9][0-9]{0,17})$`)
	dottedDigit = regexp.MustCompile(`^[0-9]+(\.[0-9]+){2,}$`) // an IPv4 address or a version: no number
)

// maxPlainKey keeps keys well inside YAML's limit on implicit keys (1024
// characters up to the ':'), beyond which the parser refuses the document.
const maxPlainKey = 1000

// plainKey is a key converted as it is: a word of letters, digits and
// ._/- starting with a letter, not one of YAML 1.1's special words.
func plainKey(k []byte) bool {
	if len(k) == 0 || len(k) > maxPlainKey || !isLetter(k[0]) {
		return false
	}
	for _, c := range k {
		if !isLetter(c) && !isDigit(c) && c != '.' && c != '_' && c != '/' && c != '-' {
			return false
		}
	}
	return !yamlWords[string(k)]
}

// plain converts a plain scalar: true, false, a decimal integer, or a
// string that YAML 1.1 cannot read as anything else.
func (p *simpleYAML) plain(s []byte) bool {
	if len(s) == 0 {
		return false // null
	}
	switch {
	case string(s) == "true" || string(s) == "false":
		p.out = append(p.out, s...)
		return true
	case plainInt.Match(s):
		p.out = append(p.out, s...)
		return true
	case isDigit(s[0]):
		if !dottedDigit.Match(s) {
			return false
		}
	case !isLetter(s[0]) || yamlWords[string(s)]:
		return false
	}
	for _, c := range s {
		if !isLetter(c) && !isDigit(c) && c != ' ' && c != '.' && c != '_' && c != '/' && c != '-' && c != '+' && c != '=' && c != '@' {
			return false
		}
	}
	p.out = append(p.out, '"')
	p.out = append(p.out, s...)
	p.out = append(p.out, '"')
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
