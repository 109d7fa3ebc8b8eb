package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Age renders how long ago t was, in one short unit.
func Age(now, t time.Time) string { return Span(now.Sub(t)) }

// Span is d in its largest whole unit, as Age says it: "42s", "17m",
// "5h" (under two days), "3d".
func Span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Printable shows text a box or another writer of the yard chose (a
// rationale, a reason) on a terminal as inert text: every control or
// unprintable character, a newline or an escape sequence's ESC included,
// is written as its Go escape, so the text can neither forge a line of the
// desk's report nor move the cursor. A tab is kept: code is full of them.
func Printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, unsafeRune) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r != ' ' && r != '\t' && (unicode.IsControl(r) || !unicode.IsPrint(r))
}

// PrintableLines keeps s's lines and shows each Printable: a task's text,
// a payload, a memory entry is the box's, a sender's or an upstream's
// text, whose line breaks are its own but whose carriage returns and
// escape sequences must not rewrite what the terminal already shows.
func PrintableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Printable(l)
	}
	return strings.Join(lines, "\n")
}

// Cell is Printable for one cell of a tab-separated table: a tab is
// escaped as well, so the text cannot move itself into another column.
func Cell(s string) string {
	return strings.ReplaceAll(Printable(s), "\t", `\t`)
}

// OneLine squeezes s onto one line of at most n characters, printable.
func OneLine(s string, n int) string {
	s = Printable(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Timeline renders one transition as a line of a human timeline; who and
// why are shown printable.
func Timeline(at time.Time, from, to, by, why string) string {
	if from == "" {
		from = "-"
	}
	s := fmt.Sprintf("%s  %-12s -> %-12s by %s", at.Local().Format(time.RFC3339), from, to, Printable(by))
	if why != "" {
		s += ": " + Printable(why)
	}
	return s
}
