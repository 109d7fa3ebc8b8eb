package tests

import (
	"bufio"
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/impyard/impyard/"

// readmeLayers reads README's map of the packages: each layer, lowest
// first (a line "**Name**: ..."), and the packages listed under it
// ("- `lib/x` what it is"), by package, its layer's index and name.
func readmeLayers(t *testing.T) (layer map[string]int, names []string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := regexp.MustCompile(`^\*\*([^*]+)\*\*:`)
	item := regexp.MustCompile("^- `((?:lib|internal)/[a-z0-9/]+)` \\S")
	layer = map[string]int{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "### The packages, by layer":
			in = true
		case !in:
		case strings.HasPrefix(line, "#"):
			in = false
		case head.MatchString(line):
			names = append(names, head.FindStringSubmatch(line)[1])
		case item.MatchString(line):
			p := item.FindStringSubmatch(line)[1]
			if len(names) == 0 {
				t.Fatalf("README: %s is listed before any layer", p)
			}
			if _, dup := layer[p]; dup {
				t.Errorf("README: %s is listed twice", p)
			}
			layer[p] = len(names) - 1
		case strings.HasPrefix(line, "- "):
			t.Errorf("README: %q in the map of packages names no package as `lib/...` or `internal/...`", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(layer) == 0 {
		t.Fatal(`README has no "### The packages, by layer" listing packages`)
	}
	return layer, names
}

// goPackages returns the import path (below the module) of every package
// under the repository's dirs, with the imports of its non-test files,
// those of the crash-point build included.
func goPackages(t *testing.T, dirs ...string) map[string][]string {
	t.Helper()
	crash := build.Default
	crash.BuildTags = append(slices.Clip(crash.BuildTags), "impyard_crash")
	pkgs := map[string][]string{}
	for _, top := range dirs {
		err := filepath.WalkDir(filepath.Join("..", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel("..", path)
			var imports []string
			for _, ctx := range []build.Context{build.Default, crash} {
				p, err := ctx.ImportDir(path, 0)
				var none *build.NoGoError
				if errors.As(err, &none) {
					return nil
				}
				if err != nil {
					return err
				}
				imports = append(imports, p.Imports...)
			}
			slices.Sort(imports)
			pkgs[filepath.ToSlash(rel)] = slices.Compact(imports)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return pkgs
}

// TestLayout: README's map of the packages names every package of lib/
// and internal/ once and no other, and no package imports one from a
// layer after its own; no command imports the test support (the last
// layer).
func TestLayout(t *testing.T) {
	layer, names := readmeLayers(t)
	pkgs := goPackages(t, "lib", "internal")
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range pkgs {
			if !yield(p) {
				return
			}
		}
	}) {
		l, ok := layer[p]
		if !ok {
			t.Errorf("README's map of the packages does not name %s: list it under its layer", p)
			continue
		}
		for _, imp := range pkgs[p] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if dl, ok := layer[dep]; ok && dl > l {
				t.Errorf("%s (%s) imports %s, of a later layer (%s)", p, names[l], dep, names[dl])
			}
		}
	}
	for p := range layer {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("README's map of the packages names %s, which is no package", p)
		}
	}
	last := len(names) - 1
	for c, imports := range goPackages(t, "cmd") {
		for _, imp := range imports {
			if dep, ours := strings.CutPrefix(imp, module); ours && layer[dep] == last {
				t.Errorf("%s imports %s, test support (%s)", c, dep, names[last])
			}
		}
	}
}
