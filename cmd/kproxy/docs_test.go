package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// repoRoot is where README.md and docs/ live, from this package's
// directory (go test runs in it).
const repoRoot = "../.."

// The operator's flag reference must stay true: every flag `kproxy run`
// registers has a row in docs/operating.md's "Flag reference" table, every
// row names a flag that exists, and a row's default is the flag's.
func TestDocsListEveryRunFlag(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := flagReferenceRows(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var o runOptions
	fs := runFlags(&o)
	fs.VisitAll(func(f *flag.Flag) {
		def, ok := rows[f.Name]
		if !ok {
			t.Errorf("--%s: no row in docs/operating.md's flag reference", f.Name)
			return
		}
		if f.Name == "node-name" || f.DefValue == "" {
			return // the host's name, or described in words ("none", "(required)")
		}
		if !defaultShown(def, f.DefValue) {
			t.Errorf("--%s: docs/operating.md shows the default %q, the flag's is %q", f.Name, def, f.DefValue)
		}
	})
	for name := range rows {
		if fs.Lookup(name) == nil {
			t.Errorf("docs/operating.md's flag reference lists --%s, which kproxy run does not have", name)
		}
	}
}

// flagReferenceRows reads the table under "## Flag reference": the flag
// in each row's first cell, and its second cell (the default).
func flagReferenceRows(doc string) (map[string]string, error) {
	_, section, ok := strings.Cut(doc, "\n## Flag reference\n")
	if !ok {
		return nil, errorString("docs/operating.md has no \"## Flag reference\" section")
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	flagCell := regexp.MustCompile("^`--([a-z0-9-]+)`$")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			return nil, errorString("short flag reference row: " + line)
		}
		m := flagCell.FindStringSubmatch(strings.TrimPrefix(cells[0], "| "))
		if m == nil {
			return nil, errorString("flag reference row not for one flag: " + line)
		}
		if _, dup := rows[m[1]]; dup {
			return nil, errorString("--" + m[1] + " listed twice")
		}
		rows[m[1]] = cells[1]
	}
	if len(rows) == 0 {
		return nil, errorString("docs/operating.md's flag reference has no rows")
	}
	return rows, nil
}

// defaultShown reports whether cell shows def as a `code` span, durations
// compared by value ("15m" for "15m0s").
func defaultShown(cell, def string) bool {
	want, isDur := time.ParseDuration(def)
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(cell, -1) {
		if m[1] == def {
			return true
		}
		if d, err := time.ParseDuration(m[1]); isDur == nil && err == nil && d == want {
			return true
		}
	}
	return false
}

type errorString string

func (e errorString) Error() string { return string(e) }

// The README and docs/ point at files of this repository only, and those
// files exist: markdown links, docs/*.md mentioned in text, and `code`
// spans naming a path under one of the repository's top-level directories.
// Nor do they carry issue numbers or machine load figures, which belong in
// commit messages.
func TestDocsReferencesResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(repoRoot, "README.md"))
	top := map[string]bool{}
	entries, err := os.ReadDir(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// bin/ holds what make builds: the docs name its files, which a
		// checkout need not have.
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" {
			top[e.Name()] = true
		}
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docRef := regexp.MustCompile(`\bdocs/[A-Za-z0-9_-]+\.md\b`)
	code := regexp.MustCompile("`([^`\\s]+)`")
	issue := regexp.MustCompile(`\b[\w.-]+/[\w.-]+#[0-9]+\b|\bissue #?[0-9]+\b|(?i)load\s+\(?average`)
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		name, _ := filepath.Rel(repoRoot, doc)
		var refs []string // paths relative to the repository root
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			refs = append(refs, filepath.Join(filepath.Dir(name), target))
		}
		refs = append(refs, docRef.FindAllString(text, -1)...)
		for _, m := range code.FindAllStringSubmatch(text, -1) {
			p := strings.TrimRight(m[1], ".,:;")
			if strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/work/") {
				t.Errorf("%s: `%s` points outside the repository", name, m[1])
				continue
			}
			first, _, nested := strings.Cut(p, "/")
			if !nested || !top[first] || strings.ContainsAny(p, "{}<>$%") || strings.Contains(p, "...") {
				continue
			}
			refs = append(refs, p)
		}
		for _, ref := range refs {
			clean := filepath.Clean(ref)
			if clean == ".." || strings.HasPrefix(clean, "../") {
				t.Errorf("%s: %s points outside the repository", name, ref)
				continue
			}
			matches, err := filepath.Glob(filepath.Join(repoRoot, clean))
			if err != nil || len(matches) == 0 {
				t.Errorf("%s: %s does not exist", name, ref)
			}
		}
		var found []string
		for _, m := range issue.FindAllString(text, -1) {
			found = append(found, m)
		}
		if len(found) > 0 {
			sort.Strings(found)
			t.Errorf("%s: issue numbers or load figures (history belongs in commits): %q", name, found)
		}
	}
}
