// Package crashstate rebuilds the states a power cut can leave of a
// directory tree, in the spirit of ALICE (Pillai et al., "All File
// Systems Are Not Created Equal", OSDI 2014): from a snapshot of the tree
// taken before a command and the trace of every operation lib/store
// performed (store.TraceEnv), it lists, for a prefix of the trace (the
// power going out after that many operations), the trees the disk may
// hold, and writes one back in place so that the next command can run on
// it and a test can check what it finds.
//
// The model of the disk, deliberately weaker than any one file system's:
//
//   - A write, an append or a truncate of a file is durable only once the
//     file is fsynced (or fdatasynced) after it; until then it may be
//     lost, and a write or an append may be cut at any byte.
//   - A create, a mkdir, an unlink is durable only once its directory is
//     fsynced after it; until then it may be undone. A new directory is
//     itself such an entry: everything in it is lost with it.
//   - A rename is atomic (never both names, never neither for a file that
//     was durable) and durable once the directory it renames into is
//     fsynced.
//   - Operations not yet durable persist or not independently of each
//     other, in any combination: no ordering between them is assumed.
//
// How many of those combinations are tried is bounded (see Plan); each
// resulting tree is tried once, however many combinations lead to it.
package crashstate

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/impyard/impyard/lib/store"
)

// Record is one line of a trace: an operation (see store.Op) or a mark.
type Record struct {
	Pid  int          `json:"pid,omitempty"`
	Kind store.OpKind `json:"op,omitempty"`
	Path string       `json:"path,omitempty"`
	To   string       `json:"to,omitempty"`
	Off  int64        `json:"off,omitempty"`
	Data []byte       `json:"data,omitempty"`
	Mark string       `json:"mark,omitempty"`
}

// String names the record for a report.
func (r Record) String() string {
	switch {
	case r.Mark != "":
		return "mark " + r.Mark
	case r.Kind == store.OpRename:
		return fmt.Sprintf("rename %s -> %s", r.Path, r.To)
	case r.Kind == store.OpWrite || r.Kind == store.OpAppend:
		return fmt.Sprintf("%s %s @%d +%d", r.Kind, r.Path, r.Off, len(r.Data))
	case r.Kind == store.OpTruncate:
		return fmt.Sprintf("truncate %s to %d", r.Path, r.Off)
	}
	return fmt.Sprintf("%s %s", r.Kind, r.Path)
}

// ReadTrace reads the trace file at path.
func ReadTrace(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return recs, nil
}

// Mark appends a mark to the trace file at path, in order with the
// operations traced processes append: an effect outside the tree (a
// request an upstream received) or an acknowledgement a client was given.
func Mark(path, mark string) error {
	line, err := json.Marshal(Record{Mark: mark})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type inode struct {
	dir  bool
	mode fs.FileMode
	data []byte
	ents map[string]int
}

func (n *inode) clone() *inode {
	c := &inode{dir: n.dir, mode: n.mode, data: append([]byte(nil), n.data...)}
	if n.dir {
		c.ents = make(map[string]int, len(n.ents))
		for k, v := range n.ents {
			c.ents[k] = v
		}
	}
	return c
}

// tree is a file system as inodes; inode 1 is the base directory.
type tree map[int]*inode

func (t tree) clone() tree {
	c := make(tree, len(t))
	for k, v := range t {
		c[k] = v.clone()
	}
	return c
}

// get returns ino, made empty (a file, or a directory with dir) if this
// tree never had it: an inode whose creation a crash undid may still be
// written to, renamed or synced by operations that survived.
func (t tree) get(ino int, dir bool) *inode {
	n := t[ino]
	if n == nil {
		n = &inode{dir: dir, mode: 0o640}
		if dir {
			n.mode = fs.ModeDir | 0o750
			n.ents = map[string]int{}
		}
		t[ino] = n
	}
	return n
}

// op is a record compiled to inodes.
type op struct {
	rec             Record
	kind            store.OpKind // "" for a mark
	ino             int          // the file or directory operated on, or made
	parent, parent2 int
	name, name2     string
	off             int64
	data            []byte
}

// stateful reports whether the op changes the tree (syncs and marks do not).
func (o *op) stateful() bool {
	switch o.kind {
	case store.OpFsync, store.OpFdatasync, store.OpDirSync, "":
		return false
	}
	return true
}

// History is a snapshot and the operations performed on it since.
type History struct {
	base string
	snap tree
	ops  []op
	// made holds, empty, every inode the trace made, with the mode the
	// command left it at (the trace does not carry modes): a state
	// starts from the snapshot and these.
	made tree
}

// Load snapshots base as it is now, for a trace to be recorded against.
func Load(base string) (*History, error) {
	base = filepath.Clean(base)
	h := &History{base: base, snap: tree{}, made: tree{}}
	next := 1
	ids := map[string]int{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n := &inode{mode: fi.Mode()}
		switch {
		case d.IsDir():
			n.dir, n.ents = true, map[string]int{}
		case fi.Mode().IsRegular():
			if n.data, err = os.ReadFile(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		ids[p] = next
		h.snap[next] = n
		if p != base {
			h.snap[ids[filepath.Dir(p)]].ents[d.Name()] = next
		}
		next++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", base, err)
	}
	return h, nil
}

// errUntraced means an operation touched a file the trace never made.
var errUntraced = errors.New("not in the snapshot and never made in the trace")

// Replay compiles the trace records onto the snapshot. Operations outside
// the base directory are left out.
func (h *History) Replay(recs []Record) error {
	live := h.snap.clone()
	next := 0
	for k := range live {
		next = max(next, k)
	}
	lookup := func(p string) (parent int, name string, ino int, err error) {
		rel, err := filepath.Rel(h.base, p)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			return 0, "", 0, fmt.Errorf("%s: not below %s", p, h.base)
		}
		parent = 1
		parts := strings.Split(rel, string(filepath.Separator))
		for _, c := range parts[:len(parts)-1] {
			d := live[parent]
			if d == nil || !d.dir || d.ents[c] == 0 {
				return 0, "", 0, fmt.Errorf("%s: %w", p, errUntraced)
			}
			parent = d.ents[c]
		}
		name = parts[len(parts)-1]
		return parent, name, live[parent].ents[name], nil
	}
	for _, r := range recs {
		if r.Mark != "" {
			h.ops = append(h.ops, op{rec: r})
			continue
		}
		if rel, err := filepath.Rel(h.base, r.Path); err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		parent, name, ino, err := lookup(r.Path)
		if err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
		o := op{rec: r, kind: r.Kind, ino: ino, parent: parent, name: name, off: r.Off, data: r.Data}
		switch r.Kind {
		case store.OpMkdir, store.OpCreate:
			if ino != 0 {
				continue // there already: O_CREAT made nothing
			}
			next++
			o.ino = next
			h.made.get(next, r.Kind == store.OpMkdir)
			live.get(next, r.Kind == store.OpMkdir)
			live[parent].ents[name] = next
			h.mode(next, r.Path)
		case store.OpRename:
			if ino == 0 {
				return fmt.Errorf("%s: %w", r, errUntraced)
			}
			p2, n2, _, err := lookup(r.To)
			if err != nil {
				return fmt.Errorf("%s: %w", r, err)
			}
			o.parent2, o.name2 = p2, n2
			o.apply(live, len(o.data))
			h.mode(ino, r.To)
		default:
			if ino == 0 {
				return fmt.Errorf("%s: %w", r, errUntraced)
			}
			o.apply(live, len(o.data))
		}
		if r.Kind == store.OpAppend {
			o.kind = store.OpWrite
		}
		h.ops = append(h.ops, o)
	}
	return nil
}

// mode takes the mode of ino, a made inode, from what p is now.
func (h *History) mode(ino int, p string) {
	if n := h.made[ino]; n != nil {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() == n.dir {
			n.mode = fi.Mode()
		}
	}
}

// Len is the number of records replayed (operations and marks).
func (h *History) Len() int { return len(h.ops) }

// Op describes the ith record.
func (h *History) Op(i int) Record { return h.ops[i].rec }

// apply performs o on t, writing only cut bytes of a write.
func (o *op) apply(t tree, cut int) {
	switch o.kind {
	case store.OpMkdir, store.OpCreate:
		t.get(o.ino, o.kind == store.OpMkdir)
		t.get(o.parent, true).ents[o.name] = o.ino
	case store.OpWrite, store.OpAppend:
		n := t.get(o.ino, false)
		end := o.off + int64(cut)
		if int64(len(n.data)) < end {
			n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
		}
		copy(n.data[o.off:], o.data[:cut])
	case store.OpTruncate:
		n := t.get(o.ino, false)
		if int64(len(n.data)) > o.off {
			n.data = n.data[:o.off]
		} else {
			n.data = append(n.data, make([]byte, o.off-int64(len(n.data)))...)
		}
	case store.OpRename:
		src := t.get(o.parent, true)
		if src.ents[o.name] == o.ino {
			delete(src.ents, o.name)
		}
		t.get(o.parent2, true).ents[o.name2] = o.ino
	case store.OpUnlink:
		d := t.get(o.parent, true)
		if d.ents[o.name] == o.ino {
			delete(d.ents, o.name)
		}
	}
}

// durable reports whether op i is made durable by a sync before k.
func (h *History) durable(i, k int) bool {
	o := &h.ops[i]
	for j := i + 1; j < k; j++ {
		s := &h.ops[j]
		switch o.kind {
		case store.OpWrite, store.OpTruncate:
			if (s.kind == store.OpFsync || s.kind == store.OpFdatasync) && s.ino == o.ino {
				return true
			}
		case store.OpMkdir, store.OpCreate, store.OpUnlink:
			if s.kind == store.OpDirSync && s.ino == o.parent {
				return true
			}
		case store.OpRename:
			if s.kind == store.OpDirSync && s.ino == o.parent2 {
				return true
			}
		}
	}
	return false
}

// State is one tree a power cut after Prefix operations may leave.
type State struct {
	h      *History
	Prefix int
	// Kept and Cut are what of the operations not yet durable made it:
	// those in Kept whole, the one in Cut (if not -1) to CutAt bytes.
	Kept  map[int]bool
	Cut   int
	CutAt int
}

// Marks returns the marks recorded before the state's prefix.
func (s *State) Marks() []string {
	var m []string
	for _, o := range s.h.ops[:s.Prefix] {
		if o.rec.Mark != "" {
			m = append(m, o.rec.Mark)
		}
	}
	return m
}

// Marked reports whether mark was recorded before the state's prefix.
func (s *State) Marked(mark string) bool {
	for _, m := range s.Marks() {
		if m == mark {
			return true
		}
	}
	return false
}

// String describes the state: where the power went out, and what of the
// operations not yet durable was lost or cut.
func (s *State) String() string {
	var b strings.Builder
	if s.Prefix < len(s.h.ops) {
		fmt.Fprintf(&b, "power cut before op %d (%s)", s.Prefix, s.h.rel(s.h.ops[s.Prefix].rec))
	} else {
		fmt.Fprintf(&b, "power cut after the last op (%d)", s.Prefix)
	}
	var lost []string
	for i := 0; i < s.Prefix; i++ {
		if s.h.ops[i].stateful() && !s.h.durable(i, s.Prefix) {
			switch {
			case i == s.Cut:
				lost = append(lost, fmt.Sprintf("cut at byte %d: op %d (%s)", s.CutAt, i, s.h.rel(s.h.ops[i].rec)))
			case !s.Kept[i]:
				lost = append(lost, fmt.Sprintf("lost: op %d (%s)", i, s.h.rel(s.h.ops[i].rec)))
			}
		}
	}
	if len(lost) == 0 {
		b.WriteString("; nothing lost")
	} else {
		b.WriteString("; " + strings.Join(lost, "; "))
	}
	return b.String()
}

// rel names r's paths relative to the base, as a report does.
func (h *History) rel(r Record) string {
	r.Path = strings.TrimPrefix(strings.TrimPrefix(r.Path, h.base), "/")
	r.To = strings.TrimPrefix(strings.TrimPrefix(r.To, h.base), "/")
	return r.String()
}

// build returns the tree of the state.
func (s *State) build() tree {
	t := s.h.snap.clone()
	for ino, n := range s.h.made {
		t[ino] = n.clone()
	}
	for i := 0; i < s.Prefix; i++ {
		o := &s.h.ops[i]
		if !o.stateful() {
			continue
		}
		switch {
		case s.h.durable(i, s.Prefix), s.Kept[i]:
			o.apply(t, len(o.data))
		case i == s.Cut:
			o.apply(t, s.CutAt)
		}
	}
	return t
}

// Write replaces the base directory with the state's tree.
func (s *State) Write() error {
	t := s.build()
	if err := os.RemoveAll(s.h.base); err != nil {
		return err
	}
	var write func(p string, ino int) error
	write = func(p string, ino int) error {
		n := t[ino]
		if !n.dir {
			return os.WriteFile(p, n.data, n.mode.Perm())
		}
		if err := os.Mkdir(p, n.mode.Perm()); err != nil {
			return err
		}
		for name, c := range n.ents {
			if err := write(filepath.Join(p, name), c); err != nil {
				return err
			}
		}
		// Mkdir's mode is narrowed by the umask.
		return os.Chmod(p, n.mode.Perm())
	}
	return write(s.h.base, 1)
}

// sum identifies the state's tree: states with the same sum are the same
// files with the same contents.
func (s *State) sum() [32]byte {
	t := s.build()
	var lines []string
	var walk func(p string, ino int)
	walk = func(p string, ino int) {
		n := t[ino]
		if !n.dir {
			lines = append(lines, fmt.Sprintf("%s %v %x", p, n.mode, sha256.Sum256(n.data)))
			return
		}
		lines = append(lines, fmt.Sprintf("%s %v", p, n.mode))
		for name, c := range n.ents {
			walk(p+"/"+name, c)
		}
	}
	walk("", 1)
	sort.Strings(lines)
	return sha256.Sum256([]byte(strings.Join(lines, "\n")))
}

// cuts are the bytes a write of n bytes not yet durable is cut at, past
// none of it (losing it) and all: half, and when wide one byte and all
// but one.
func cuts(n int, wide bool) []int {
	seen := map[int]bool{}
	var c []int
	at := []int{n / 2}
	if wide {
		at = []int{1, n / 2, n - 1}
	}
	for _, v := range at {
		if v > 0 && v < n && !seen[v] {
			seen[v] = true
			c = append(c, v)
		}
	}
	return c
}

// Plan bounds which states are listed.
type Plan struct {
	// EveryPrefix lists states at every prefix of the trace; without it,
	// only where the unsynced window is widest: just before each sync
	// (and each mark), and after the last operation.
	EveryPrefix bool
	// Subsets, when the operations not yet durable at a prefix are no
	// more than this many, tries every combination of them; more, and it
	// tries the combinations below. Zero: only those.
	Subsets int
	// Wide adds to each unsynced operation lost alone the same
	// operation kept alone, and cuts each unsynced write also at one
	// byte and all but one, each with the rest kept and with the rest
	// lost; without it a write is cut at half, with the rest kept.
	Wide bool
}

// States lists the distinct trees a power cut may leave, under plan.
// Whatever the plan, at every prefix it lists: everything kept (the
// process killed, the page cache intact), nothing not yet durable kept,
// each such operation alone lost, and each write or append not yet
// durable cut at half, the rest kept.
func (h *History) States(plan Plan) []*State {
	var out []*State
	seen := map[[32]byte]bool{}
	add := func(s *State) {
		sum := s.sum()
		// A state with the same tree but more marks (effects) behind it
		// is a different question for the invariants: keep the sum per
		// number of marks.
		key := sha256.Sum256(append(sum[:], []byte(strings.Join(s.Marks(), "\x00"))...))
		if !seen[key] {
			seen[key] = true
			out = append(out, s)
		}
	}
	for k := 0; k <= len(h.ops); k++ {
		if !plan.EveryPrefix && k < len(h.ops) && h.ops[k].stateful() && (k == 0 || h.ops[k-1].kind != "") {
			continue
		}
		var opt []int
		for i := 0; i < k; i++ {
			if h.ops[i].stateful() && !h.durable(i, k) {
				opt = append(opt, i)
			}
		}
		state := func(kept ...int) *State {
			s := &State{h: h, Prefix: k, Kept: map[int]bool{}, Cut: -1}
			for _, i := range kept {
				s.Kept[i] = true
			}
			return s
		}
		add(state(opt...))
		add(state())
		if len(opt) <= plan.Subsets {
			for m := 1; m < 1<<len(opt)-1; m++ {
				var kept []int
				for b, i := range opt {
					if m&(1<<b) != 0 {
						kept = append(kept, i)
					}
				}
				add(state(kept...))
			}
		}
		for x, u := range opt {
			others := append(append([]int(nil), opt[:x]...), opt[x+1:]...)
			add(state(others...))
			if plan.Wide {
				add(state(u))
			}
			if h.ops[u].kind != store.OpWrite {
				continue
			}
			for _, c := range cuts(len(h.ops[u].data), plan.Wide) {
				s := state(others...)
				s.Cut, s.CutAt = u, c
				add(s)
				if plan.Wide {
					s = state()
					s.Cut, s.CutAt = u, c
					add(s)
				}
			}
		}
	}
	return out
}
