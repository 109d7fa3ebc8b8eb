package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readLines(t *testing.T, p string) (good []string, bad []BadLine) {
	t.Helper()
	bad, err := ReadJSONL(p, func(line []byte) error { good = append(good, string(line)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return good, bad
}

func TestAppendLineLimits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events.jsonl")
	// A record of exactly MaxLine bytes, newline included, is taken.
	atLimit := `"` + strings.Repeat("a", MaxLine-3) + `"` + "\n"
	if err := AppendLine(p, []byte(atLimit)); err != nil {
		t.Fatalf("record of MaxLine bytes: %v", err)
	}
	over := `"` + strings.Repeat("a", MaxLine-2) + `"` + "\n"
	if err := AppendLine(p, []byte(over)); err == nil || !strings.Contains(err.Error(), "over the 1048576 limit") {
		t.Errorf("record of MaxLine+1 bytes: %v", err)
	}
	for _, rec := range []string{"", "\n\n", "{}\n{}\n", "{}"} {
		if err := AppendLine(p, []byte(rec)); err == nil || !strings.Contains(err.Error(), "exactly one line") {
			t.Errorf("record %q: %v", rec, err)
		}
	}
	good, bad := readLines(t, p)
	if len(good) != 1 || len(good[0]) != MaxLine-1 || len(bad) != 0 {
		t.Errorf("file holds %d good lines, %v bad; want only the first record", len(good), bad)
	}
	fi, _ := os.Stat(p)
	if fi.Size() != MaxLine || fi.Mode().Perm() != FilePerm {
		t.Errorf("file is %d bytes mode %v, want %d and %v", fi.Size(), fi.Mode().Perm(), MaxLine, os.FileMode(FilePerm))
	}
	if err := AppendJSONL(p, func() {}); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("AppendJSONL of a func: %v", err)
	}
}

func TestAppendAfterWholeLineAddsNoBlankLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	for _, rec := range []string{`{"n":1}`, `{"n":2}`} {
		if err := AppendJSONL(p, map[string]any{"n": rec[5:6]}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(p)
	if string(b) != "{\"n\":\"1\"}\n{\"n\":\"2\"}\n" {
		t.Errorf("file %q", b)
	}
	// A file ending without a newline (one byte, torn) gets one first.
	q := filepath.Join(t.TempDir(), "b.jsonl")
	os.WriteFile(q, []byte("{"), 0o640)
	AppendLine(q, []byte("{}\n"))
	if b, _ := os.ReadFile(q); string(b) != "{\n{}\n" {
		t.Errorf("after a torn byte: %q", b)
	}
}

func TestAppendRefusesPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("keep\n"), 0o640)
	os.Symlink(target, filepath.Join(dir, "link.jsonl"))
	os.Link(target, filepath.Join(dir, "hard.jsonl"))
	for _, name := range []string{"link.jsonl", "hard.jsonl"} {
		if err := AppendLine(filepath.Join(dir, name), []byte("{}\n")); err == nil {
			t.Errorf("appended through %s", name)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("target changed to %q", b)
	}
	if _, err := ReadJSONL(filepath.Join(dir, "link.jsonl"), func([]byte) error { return nil }); err == nil {
		t.Error("read through a symlink")
	}
	if err := ScanBack(filepath.Join(dir, "link.jsonl"), func([]byte) bool { return false }); err == nil {
		t.Error("scanned through a symlink")
	}
}

func TestReadJSONL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	if bad, err := ReadJSONL(p, func([]byte) error { t.Error("line in a missing file"); return nil }); err != nil || bad != nil {
		t.Errorf("missing file: %v %v", bad, err)
	}
	// CRLF endings and blank lines; a last line without its newline.
	os.WriteFile(p, []byte("{\"n\":1}\r\n\n  \n{\"n\":2}\nnot json\n[3]"), 0o640)
	good, bad := readLines(t, p)
	if strings.Join(good, "|") != `{"n":1}|{"n":2}|[3]` {
		t.Errorf("good lines %q", good)
	}
	// The whitespace-only line is not blank to the reader: it is bad.
	if len(bad) != 2 || bad[0].Line != 3 || bad[1].Line != 5 || !strings.Contains(bad[1].Error(), "a.jsonl:5: skipped: not a whole JSON record") {
		t.Errorf("bad lines %v", bad)
	}
	// An error from fn stops the read and is returned, with the bad lines
	// found so far.
	stop := errors.New("enough")
	var n int
	bad, err := ReadJSONL(p, func([]byte) error { n++; return stop })
	if err != stop || n != 1 || len(bad) != 0 {
		t.Errorf("stop: %d lines, bad %v, err %v", n, bad, err)
	}
	if _, err := ReadJSONL(t.TempDir(), func([]byte) error { return nil }); err == nil {
		t.Error("read a directory as a log")
	}
}

// A line of exactly MaxLine bytes, its newline included (the most
// AppendLine writes), is read; one byte more is reported, and the lines
// after either are still read.
func TestReadJSONLLineLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	at := `"` + strings.Repeat("a", MaxLine-3) + `"`   // MaxLine bytes with its newline
	over := `"` + strings.Repeat("a", MaxLine-2) + `"` // one more
	os.WriteFile(p, []byte(at+"\n"+over+"\n{}\n"+over+"x"), 0o640)
	good, bad := readLines(t, p)
	if len(good) != 2 || len(good[0]) != MaxLine-1 || good[1] != "{}" {
		t.Errorf("good lines: %d (first %d bytes)", len(good), len(good[0]))
	}
	if len(bad) != 2 || bad[0].Line != 2 || bad[1].Line != 4 || !strings.Contains(bad[0].Err.Error(), "over the 1048576 byte limit") {
		t.Errorf("bad lines %v", bad)
	}
}

func TestScanBackBlocks(t *testing.T) {
	// Lines that straddle every block boundary: each line is read whole,
	// last first.
	p := filepath.Join(t.TempDir(), "a.jsonl")
	var all strings.Builder
	var want []string
	for i := range 300 {
		line := `{"i":` + strings.Repeat("7", 1+i*7%2000) + `}`
		want = append(want, line)
		all.WriteString(line + "\n")
	}
	os.WriteFile(p, []byte(all.String()), 0o640)
	var got []string
	if err := ScanBack(p, func(l []byte) bool { got = append(got, string(l)); return false }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[len(got)-1-i] != want[i] {
			t.Fatalf("line %d differs", i)
		}
	}
	// One line only, no newline at all.
	os.WriteFile(p, []byte(`{"only":1}`), 0o640)
	got = nil
	ScanBack(p, func(l []byte) bool { got = append(got, string(l)); return false })
	if len(got) != 1 || got[0] != `{"only":1}` {
		t.Errorf("single line: %q", got)
	}
	// Blank lines and CRLF are not passed as lines.
	os.WriteFile(p, []byte("{\"a\":1}\r\n\n\n{\"b\":2}\n\n"), 0o640)
	got = nil
	ScanBack(p, func(l []byte) bool { got = append(got, string(l)); return false })
	if strings.Join(got, "|") != `{"b":2}|{"a":1}` {
		t.Errorf("blank lines: %q", got)
	}
	// An empty file has no lines.
	os.WriteFile(p, nil, 0o640)
	ScanBack(p, func(l []byte) bool { t.Errorf("line %q in an empty file", l); return false })
}

// A line longer than any record is skipped by ScanBack, and the lines
// before it are still found.
func TestScanBackSkipsHugeLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	huge := strings.Repeat("x", MaxLine+600<<10)
	os.WriteFile(p, []byte("{\"first\":1}\n"+huge+"\n{\"last\":1}\n"), 0o640)
	var got []string
	if err := ScanBack(p, func(l []byte) bool { got = append(got, string(l)); return false }); err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || got[0] != `{"last":1}` || got[len(got)-1] != `{"first":1}` {
		t.Errorf("got %d lines, first %.20q last %.20q", len(got), got[0], got[len(got)-1])
	}
	for _, l := range got {
		if len(l) > MaxLine {
			t.Errorf("a line of %d bytes was passed", len(l))
		}
	}
}

// readLine keeps at most MaxLine+1 bytes of a longer line, so a damaged
// file cannot make a reader hold it whole, and still consumes all of it.
func TestReadLineTruncates(t *testing.T) {
	for _, n := range []int{MaxLine - 1, MaxLine, MaxLine + 1, MaxLine + 2, 3*MaxLine + 7} {
		long := strings.Repeat("x", n) + "\n"
		r := bufio.NewReaderSize(strings.NewReader(long+"{}\n"), 64<<10)
		line, err := readLine(r)
		if err != nil {
			t.Fatal(err)
		}
		want := min(n+1, MaxLine+1)
		if len(line) != want || line[0] != 'x' {
			t.Errorf("line of %d bytes: kept %d, want %d of it", n+1, len(line), want)
		}
		// One that fits, up to a byte over MaxLine with its newline, is
		// kept byte for byte.
		if n+1 <= MaxLine+1 && string(line) != long {
			t.Errorf("line of %d bytes was not kept whole", n+1)
		}
		if next, err := readLine(r); err != nil || string(next) != "{}\n" {
			t.Errorf("line of %d bytes: the next line read as %q %v", n+1, next, err)
		}
	}
}

func TestScanBackEdges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	scan := func() []string {
		var got []string
		if err := ScanBack(p, func(l []byte) bool { got = append(got, string(l)); return false }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct {
		name, data string
		want       []string
	}{
		{"a blank first line", "\n{\"a\":1}\n", []string{`{"a":1}`}},
		{"a line of a lone CR", "{\"a\":1}\n\r\n{\"b\":2}\n", []string{`{"b":2}`, `{"a":1}`}},
		{"CRLF endings", "{\"a\":1}\r\n{\"b\":2}\r\n", []string{`{"b":2}`, `{"a":1}`}},
	} {
		os.WriteFile(p, []byte(c.data), 0o640)
		if got := scan(); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A record near MaxLine at the start of a large log is passed whole,
	// however many blocks it spans.
	big := `{"big":"` + strings.Repeat("b", MaxLine-20) + `"}`
	var tail strings.Builder
	for i := range 2000 {
		tail.WriteString(`{"i":` + strings.Repeat("1", i%30+1) + "}\n")
	}
	os.WriteFile(p, []byte(big+"\n"+tail.String()), 0o640)
	got := scan()
	if len(got) != 2001 || got[len(got)-1] != big {
		t.Errorf("%d lines, the first %d bytes; want 2001 and the big record whole", len(got), len(got[len(got)-1]))
	}
}

// AppendLineIn creates the directory, appends whole lines after a torn
// one, and refuses a symlinked directory on the way or a log that is a
// symlink or a hard link, writing nothing through them.
func TestAppendLineIn(t *testing.T) {
	root := t.TempDir()
	for _, l := range []string{"{\"a\":1}\n", "{\"b\":2}\n"} {
		if err := AppendLineIn(root, "journal/yuko", "events.jsonl", []byte(l), "mid-append"); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(root, "journal", "yuko", "events.jsonl")
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"torn`)
	f.Close()
	if err := AppendLineIn(root, "journal/yuko", "events.jsonl", []byte("{\"c\":3}\n"), "mid-append"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"a\":1}\n{\"b\":2}\n{\"torn\n{\"c\":3}\n" {
		t.Errorf("log:\n%s", b)
	}
	if err := AppendLineIn(root, "journal/yuko", "events.jsonl", []byte("two\nlines\n"), "mid-append"); err == nil {
		t.Error("two lines appended as one record")
	}
	if err := AppendLineIn(root, "journal/yuko", "../x", []byte("{}\n"), "mid-append"); err == nil {
		t.Error("a path for a name")
	}
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(root, "journal", "kit"))
	err := AppendLineIn(root, "journal/kit", "events.jsonl", []byte("{}\n"), "mid-append")
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("append through a symlinked directory: %v", err)
	}
	target := filepath.Join(elsewhere, "target")
	os.Symlink(target, filepath.Join(root, "journal", "yuko", "link.jsonl"))
	if err := AppendLineIn(root, "journal/yuko", "link.jsonl", []byte("{}\n"), "mid-append"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("append to a symlink: %v", err)
	}
	os.WriteFile(target, nil, 0o640)
	os.Link(target, filepath.Join(root, "journal", "yuko", "hard.jsonl"))
	if err := AppendLineIn(root, "journal/yuko", "hard.jsonl", []byte("{}\n"), "mid-append"); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("append to a hard link: %v", err)
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 1 {
		t.Errorf("written through a link: %v", left)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("written through a link: %q", b)
	}
}

// Tail passes on each line once, as it is appended; keeps a line without
// its newline for later; starts over, after reset, on a file replaced or
// cut short; has no lines for a missing file; refuses a symbolic link; and
// says a line left without its newline is torn.
func TestTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "log.jsonl")
	tl := &Tail{Path: p}
	resets := 0
	next := func() (got []string, bad []BadLine) {
		t.Helper()
		bad, err := tl.Next(func() { resets++ }, func(line []byte, n int) { got = append(got, fmt.Sprintf("%d:%s", n, line)) })
		if err != nil {
			t.Fatal(err)
		}
		return got, bad
	}
	appendTo := func(s string) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	if got, bad := next(); got != nil || bad != nil || resets != 0 {
		t.Fatalf("missing file: %v %v %d", got, bad, resets)
	}
	appendTo("{\"a\":1}\n{\"b\":")
	if got, _ := next(); strings.Join(got, " ") != `1:{"a":1}` {
		t.Fatalf("first read: %v", got)
	}
	appendTo("2}\nnot json\n\n{\"c\":3}\n")
	got, bad := next()
	if strings.Join(got, " ") != `2:{"b":2} 5:{"c":3}` || len(bad) != 1 || bad[0].Line != 3 {
		t.Fatalf("second read: %v %v", got, bad)
	}
	if got, bad := next(); got != nil || bad != nil {
		t.Fatalf("nothing new: %v %v", got, bad)
	}

	// Replaced by a longer file: read from its start.
	os.WriteFile(p+".new", []byte("{\"x\":1}\n{\"y\":2}\n{\"z\":3}\n{\"w\":4}\n{\"v\":5}\n{\"u\":6}\n"), 0o644)
	os.Rename(p+".new", p)
	if got, _ := next(); len(got) != 6 || got[0] != `1:{"x":1}` || resets != 1 {
		t.Fatalf("after a replacement: %v, %d resets", got, resets)
	}
	// Cut short in place: read from its start.
	os.Truncate(p, 8)
	if got, _ := next(); strings.Join(got, " ") != `1:{"x":1}` || resets != 2 {
		t.Fatalf("after a truncation: %v, %d resets", got, resets)
	}
	appendTo("{\"half\":")
	next()
	if torn := tl.Torn(); len(torn) != 1 || torn[0].Line != 2 {
		t.Errorf("torn: %v", torn)
	}
	if torn := tl.Torn(); torn != nil {
		t.Errorf("torn twice: %v", torn)
	}
	os.Remove(p)
	if got, _ := next(); got != nil || resets != 3 {
		t.Errorf("after removal: %v, %d resets", got, resets)
	}
	os.WriteFile(filepath.Join(dir, "elsewhere"), []byte("{\"s\":1}\n"), 0o644)
	os.Symlink(filepath.Join(dir, "elsewhere"), p)
	if _, err := tl.Next(nil, func([]byte, int) { t.Error("a line through a symbolic link") }); err == nil {
		t.Error("a symbolic link was followed")
	}
}

// Tail reads past its buffer in one Next, and holds lines to MaxLine as
// ReadJSONL does: a line of exactly MaxLine bytes, even one that arrives
// in two appends, passes; one byte more is skipped, whether its newline
// has come or not.
func TestTailLongLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.jsonl")
	var many strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&many, "{\"n\":%d,\"pad\":%q}\n", i, strings.Repeat("x", 80))
	}
	os.WriteFile(p, []byte(many.String()), 0o644)
	tl := &Tail{Path: p}
	count := 0
	next := func() []BadLine {
		t.Helper()
		bad, err := tl.Next(nil, func([]byte, int) { count++ })
		if err != nil {
			t.Fatal(err)
		}
		return bad
	}
	if bad := next(); count != 2000 || bad != nil {
		t.Fatalf("%d lines of 2000 past the read buffer, bad %v", count, bad)
	}
	appendTo := func(s string) {
		f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0o644)
		f.WriteString(s)
		f.Close()
	}
	// A JSON string of exactly MaxLine bytes, in two appends.
	long := `"` + strings.Repeat("y", MaxLine-2) + `"`
	appendTo(long[:MaxLine-10])
	if bad := next(); bad != nil || count != 2000 {
		t.Fatalf("the first part of a line: %v", bad)
	}
	appendTo(long[MaxLine-10:] + "\n")
	if bad := next(); bad != nil || count != 2001 {
		t.Fatalf("a line of exactly MaxLine bytes: %d lines, bad %v", count-2000, bad)
	}
	// One byte more, its newline come: skipped.
	longer := `"` + strings.Repeat("y", MaxLine-1) + `"`
	appendTo(longer[:MaxLine-10])
	next()
	appendTo(longer[MaxLine-10:] + "\n")
	if bad := next(); len(bad) != 1 || !strings.Contains(bad[0].Err.Error(), "over the") || count != 2001 {
		t.Fatalf("a line of MaxLine+1 bytes: %v", bad)
	}
	// Without its newline: kept at MaxLine (torn if it never ends) ...
	appendTo(strings.Repeat("z", MaxLine))
	if bad := next(); bad != nil {
		t.Fatalf("MaxLine bytes waiting for their newline: %v", bad)
	}
	if torn := tl.Torn(); len(torn) != 1 {
		t.Fatalf("torn: %v", torn)
	}
	// ... and dropped past it.
	appendTo(strings.Repeat("z", MaxLine+1))
	if bad := next(); len(bad) != 1 || !strings.Contains(bad[0].Err.Error(), "over the") || bad[0].Line != 2003 {
		t.Fatalf("MaxLine+1 bytes without a newline: %v, want line 2003", bad)
	}
}

// Skip starts a Tail at the end, as tail -f does: the lines there are
// passed over, counted for their numbers, however long the file; a line
// being written is kept and passed on once its newline comes; a missing
// file is read from its start once it exists.
func TestTailSkip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.jsonl")
	tl := &Tail{Path: p}
	if err := tl.Skip(); err != nil {
		t.Fatal(err)
	}
	var many strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&many, "{\"n\":%d,\"pad\":%q}\n", i, strings.Repeat("x", 80))
	}
	os.WriteFile(p, []byte(many.String()+"{\"d\":"), 0o644)
	var got []string
	next := func() {
		t.Helper()
		bad, err := tl.Next(nil, func(line []byte, n int) { got = append(got, fmt.Sprintf("%d:%s", n, line)) })
		if err != nil || bad != nil {
			t.Fatal(err, bad)
		}
	}
	next()
	if len(got) != 5000 {
		t.Fatalf("a file made after a Skip of none: %d lines, want 5000", len(got))
	}

	tl, got = &Tail{Path: p}, nil
	if err := tl.Skip(); err != nil {
		t.Fatal(err)
	}
	next()
	if got != nil {
		t.Fatalf("lines there before the Skip: %v", got)
	}
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0o644)
	f.WriteString("4}\n{\"e\":5}\n")
	f.Close()
	next()
	if strings.Join(got, " ") != `5001:{"d":4} 5002:{"e":5}` {
		t.Errorf("after the Skip: %v", got)
	}
}

// ReadJSONLContaining passes on the valid lines that hold every string,
// reports those of them that are damaged, and passes over the rest, damaged
// or not, unreported.
func TestReadJSONLContaining(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.jsonl")
	os.WriteFile(p, []byte(`{"a":1,"t":"x"}`+"\n"+`{"a":2}`+"\n"+"{torn\n"+`{"t":"x","a":3`+"\n"+`{"a":4,"t":"x"}`+"\n"), 0o644)
	var got []string
	bad, err := ReadJSONLContaining(p, [][]byte{[]byte(`"t":"x"`), []byte(`"a"`)}, func(line []byte) error {
		got = append(got, string(line))
		return nil
	})
	if err != nil || strings.Join(got, " ") != `{"a":1,"t":"x"} {"a":4,"t":"x"}` || len(bad) != 1 || bad[0].Line != 4 {
		t.Errorf("got %v, bad %v, %v", got, bad, err)
	}
	if got, err := ReadJSONLContaining(filepath.Join(t.TempDir(), "none"), nil, func([]byte) error { return nil }); got != nil || err != nil {
		t.Errorf("a missing file: %v %v", got, err)
	}
}
