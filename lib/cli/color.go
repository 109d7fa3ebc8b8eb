package cli

import (
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ColorMode is --color's value: auto, always or never.
type ColorMode string

// The --color values.
const (
	ColorAuto   ColorMode = "auto"
	ColorAlways ColorMode = "always"
	ColorNever  ColorMode = "never"
)

func (m *ColorMode) String() string { return string(*m) }

func (m *ColorMode) Set(s string) error {
	switch ColorMode(s) {
	case ColorAuto, ColorAlways, ColorNever:
		*m = ColorMode(s)
		return nil
	}
	return fmt.Errorf("want auto, always or never")
}

// Words are the values --color takes, for its completion.
func (m *ColorMode) Words() []string {
	return []string{string(ColorAuto), string(ColorAlways), string(ColorNever)}
}

// ColorFlag adds --color=auto|always|never to fs.
func ColorFlag(fs *flag.FlagSet) *ColorMode {
	m := ColorAuto
	fs.Var(&m, "color", "colour the output: auto (on a terminal, unless $NO_COLOR is set), always or never; `WHEN`")
	return &m
}

// Colour decides, in one place for every command, whether output to w is
// coloured: never for never; for always, yes (an explicit request
// overrides $NO_COLOR, as no-color.org asks); for auto, only when w is a
// terminal and $NO_COLOR is empty or unset.
func Colour(mode ColorMode, w io.Writer) bool {
	switch mode {
	case ColorNever:
		return false
	case ColorAlways:
		return true
	}
	return os.Getenv("NO_COLOR") == "" && IsTerminal(w)
}

// IsTerminal reports whether s (a reader or writer) is a terminal.
func IsTerminal(s any) bool {
	f, ok := s.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Style is one colour of the palette.
type Style string

// The palette. Every code is five bytes long, Plain included, so columns
// that tabwriter aligns stay aligned when every cell of one is painted.
const (
	Plain Style = "\x1b[39m"
	Bold  Style = "\x1b[01m"
	Red   Style = "\x1b[31m"
	Green Style = "\x1b[32m"
	Amber Style = "\x1b[33m"
	Cyan  Style = "\x1b[36m"
)

const reset = "\x1b[0m"

// Painter paints text in a style when colour is on, and leaves it alone
// when it is off.
type Painter bool

// Paint returns s in style st.
func (p Painter) Paint(st Style, s string) string {
	if !p {
		return s
	}
	return string(st) + s + reset
}

// StateStyle is the colour of a verdict or a record's state: green for
// what went through, red for what was stopped or failed, amber for what
// waits on someone.
func StateStyle(s string) Style {
	switch s {
	case "allow", "tunnel", "approved", "executed", "done":
		return Green
	case "deny", "reject", "refused", "denied", "expired", "failed", "cancelled":
		return Red
	case "filed", "needs-review", "waiting", "running", "executing":
		return Amber
	}
	return Plain
}
