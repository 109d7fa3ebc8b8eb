package cli

import (
	"bufio"
	"text/tabwriter"
)

// List prints a listing as each produces its records: with asJSON one
// JSON object per line, else a table with header whose rows row renders
// as tab-separated cells, aligned once the last is known. Records go out
// as they come, through one buffered writer, so a listing of any size
// holds only the table's text. Files each could not read are warned of
// on stderr; an error from each or from writing is returned.
func List[R any](e *Env, asJSON bool, header string, row func(R) string, each func(fn func(R) error) (bad []error, err error)) error {
	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	var tw *tabwriter.Writer
	fn := func(r R) error { return JSONLine(out, r) }
	if !asJSON {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		if _, err := tw.Write([]byte(header + "\n")); err != nil {
			return err
		}
		fn = func(r R) error {
			_, err := tw.Write([]byte(row(r) + "\n"))
			return err
		}
	}
	bad, err := each(fn)
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
