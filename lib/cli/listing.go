package cli

import (
	"bufio"
	"text/tabwriter"

	"github.com/impyard/impyard/lib/store"
)

// Line is one record of a listing rendered for output: its JSON line or
// its table row, or the error rendering it met.
type Line struct {
	text []byte
	err  error
}

// List prints a listing as each produces its records: with asJSON one
// JSON object per line, else a table with header whose rows row renders
// as tab-separated cells, aligned once the last is known. each renders
// every record it lists with render, which is safe to call from several
// goroutines, so the records can be rendered where they are read, on
// every core, and passes the lines to emit in order. Lines go out as
// they come, through one buffered writer, so a listing of any size holds
// only the table's text. Files each could not read are warned of on
// stderr; an error from each, from rendering or from writing is
// returned.
func List[R any](e *Env, asJSON bool, header string, row func(R) string, each func(render func(R) Line, emit func(Line) error) (bad []error, err error)) error {
	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	var tw *tabwriter.Writer
	render := func(r R) Line {
		b, err := store.Line(r)
		return Line{text: inertJSON(b), err: err}
	}
	emit := func(l Line) error {
		if l.err != nil {
			return l.err
		}
		_, err := out.Write(l.text)
		return err
	}
	if !asJSON {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		if _, err := tw.Write([]byte(header + "\n")); err != nil {
			return err
		}
		render = func(r R) Line { return Line{text: []byte(row(r) + "\n")} }
		emit = func(l Line) error {
			_, err := tw.Write(l.text)
			return err
		}
	}
	bad, err := each(render, emit)
	for _, b := range bad {
		e.Warn(b)
	}
	if err != nil {
		return err
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return out.Flush()
}

// Abbrev is the id a table shows: on a terminal, where a person reads
// and types it, its shortest unique abbreviation from shorts
// (id.Shortest); elsewhere the whole id, which scripts keep.
func (e *Env) Abbrev(full string, shorts map[string]string) string {
	if short, ok := shorts[full]; ok && IsTerminal(e.Stdout) {
		return short
	}
	return full
}

// Meanwhile runs f on a goroutine of its own and returns a function that
// waits for its result, so what a listing needs only to render its
// records (the ids' abbreviations, from a listing of every id) is worked
// out while the records' directories are listed and sorted, on another
// core, rather than before.
func Meanwhile[T any](f func() (T, error)) func() (T, error) {
	var v T
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err = f()
	}()
	return func() (T, error) {
		<-done
		return v, err
	}
}
