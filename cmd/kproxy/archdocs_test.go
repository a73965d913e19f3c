package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The sections of docs/architecture.md that walk the code: every file and
// Go identifier they name must exist, or a reader following them is lost.
var architectureWalks = []string{"Who owns what", "One change, file by file", "One TCP connection, file by file"}

func TestArchitectureWalksResolve(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := indexGo(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, title := range architectureWalks {
		_, section, ok := strings.Cut(string(raw), "\n## "+title+"\n")
		if !ok {
			t.Errorf("docs/architecture.md has no section %q", title)
			continue
		}
		if end := strings.Index(section, "\n## "); end >= 0 {
			section = section[:end]
		}
		for _, m := range backticked.FindAllStringSubmatch(section, -1) {
			tok := m[1]
			switch {
			case strings.Contains(tok, "/") && !strings.ContainsAny(tok, " -"):
				checked++
				if _, err := os.Stat(filepath.Join(repoRoot, tok)); err != nil {
					t.Errorf("docs/architecture.md, %q: file %s does not exist", title, tok)
				}
			case goName.MatchString(tok):
				checked++
				if !idx.resolves(tok) {
					t.Errorf("docs/architecture.md, %q: %s names nothing in the code", title, tok)
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d names checked in docs/architecture.md's walks: did their format change?", checked)
	}
}

var (
	backticked = regexp.MustCompile("`([^`\n]+)`")
	// A Go name, or a dotted path of them (pkg.Type.Method, Type.field).
	goName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$`)
)

// goIndex holds the names the repository's Go code declares.
type goIndex struct {
	topLevel map[string]bool            // every top-level name
	packages map[string]map[string]bool // package name -> its top-level names
	members  map[string]map[string]bool // type name -> its methods and fields
}

func indexGo(root string) (*goIndex, error) {
	idx := &goIndex{topLevel: map[string]bool{}, packages: map[string]map[string]bool{}, members: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		idx.add(f)
		return nil
	})
	return idx, err
}

func (idx *goIndex) member(typ, name string) {
	if idx.members[typ] == nil {
		idx.members[typ] = map[string]bool{}
	}
	idx.members[typ][name] = true
}

func (idx *goIndex) add(f *ast.File) {
	pkg := f.Name.Name
	if idx.packages[pkg] == nil {
		idx.packages[pkg] = map[string]bool{}
	}
	top := func(name string) { idx.topLevel[name], idx.packages[pkg][name] = true, true }
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				top(d.Name.Name)
				continue
			}
			if recv := receiverType(d.Recv.List[0].Type); recv != "" {
				idx.member(recv, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					top(s.Name.Name)
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							for _, n := range field.Names {
								idx.member(s.Name.Name, n.Name)
							}
							if len(field.Names) == 0 { // embedded: its name is its type's
								if name := receiverType(field.Type); name != "" {
									idx.member(s.Name.Name, name)
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						top(n.Name)
					}
				}
			}
		}
	}
}

// receiverType is the name of a receiver's or embedded field's type.
func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// resolves reports whether a name exists: Name (a top-level name, or any
// type's method or field), Type.Member, pkg.Name or pkg.Type.Member.
func (idx *goIndex) resolves(name string) bool {
	parts := strings.Split(name, ".")
	switch len(parts) {
	case 1:
		if idx.topLevel[name] {
			return true
		}
		for _, m := range idx.members {
			if m[name] {
				return true
			}
		}
		return false
	case 2:
		return idx.members[parts[0]][parts[1]] || idx.packages[parts[0]][parts[1]]
	default:
		return idx.packages[parts[0]][parts[1]] && idx.members[parts[1]][parts[2]]
	}
}
