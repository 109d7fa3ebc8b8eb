package yard

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// owners maps each top-level name in the yard to the packages allowed to
// build a path into it. lib/yard names the stores and logs it has long
// opened for their owners (QueueDir, GatesDir, JournalPath, Decisions,
// PolicyPath).
var owners = map[string][]string{
	".impyard-yard":       {"lib/yard"},
	".impyard":            {"lib/yard"},
	"queue":               {"lib/queue", "lib/yard"},
	"gates":               {"lib/gate", "lib/yard"},
	"runs":                {"lib/run", "lib/yard"},
	"journal":             {"lib/event", "lib/yard"},
	"policies":            {"lib/grant", "lib/yard"},
	"ledger":              {"lib/ledger"},
	"mailbox":             {"lib/mailbox"},
	"inbound":             {"lib/inbound"},
	"blobs":               {"lib/blob"},
	"imps":                {"lib/config"},
	"org.toml":            {"lib/config"},
	"notifications.jsonl": {"lib/executor"},
}

// homeNames are IMPYARD_HOME's entries; only lib/home joins them.
var homeNames = map[string]bool{"ca": true, "ca.crt": true, "ca.key": true, "secrets": true, "tokens": true, "keys": true, "executed": true}

// pathCalls are the calls whose string arguments are paths.
var pathCalls = map[string]bool{"Path": true, "Dir": true, "ReadDir": true, "Imps": true, "MkdirAll": true, "Mkdir": true, "OpenDir": true, "OpenIn": true, "Join": true}

// TestPathsBuiltByOwners fails when a package builds a path into a yard
// directory, or into IMPYARD_HOME, that another package owns: each such
// path must come from a function of its owner.
func TestPathsBuiltByOwners(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	for _, top := range []string{"lib", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			pkg := filepath.ToSlash(rel)
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !pathCalls[sel.Sel.Name] {
					return true
				}
				for _, a := range call.Args {
					lit, ok := a.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					s, _ := strconv.Unquote(lit.Value)
					first := strings.SplitN(s, "/", 2)[0]
					if allowed, owned := owners[first]; owned && (sel.Sel.Name != "Join" || joinsRoot(call)) && !contains(allowed, pkg) {
						t.Errorf("%s: %s builds a path into %s, owned by %s", fset.Position(lit.Pos()), pkg, first, strings.Join(allowed, ", "))
					}
					if homeNames[first] && (sel.Sel.Name == "Join" || sel.Sel.Name == "OpenDir" || sel.Sel.Name == "MkdirAll") && pkg != "lib/home" {
						t.Errorf("%s: %s builds a path into IMPYARD_HOME's %s; ask lib/home", fset.Position(lit.Pos()), pkg, first)
					}
					break
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d files checked; the walk did not find the source", checked)
	}
}

// joinsRoot is a filepath.Join onto a yard's Root.
func joinsRoot(call *ast.CallExpr) bool {
	sel, ok := call.Args[0].(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Root"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
