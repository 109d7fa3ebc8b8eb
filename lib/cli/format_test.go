package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPrintable: control and unprintable characters, newlines and ESC
// among them, are written as escapes; other text, accents and all, is
// left as it is.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é ü":    "plain text, é ü",
		"a\nb":               `a\nb`,
		"x\x1b[2Jy":          `x\x1b[2Jy`,
		"tab\there\r":        "tab\there\\r",
		"del\x7f c1\u009b z": `del\x7f c1\u009b z`,
		"bidi\u202eevil":     `bidi\u202eevil`,
		"bad utf8 \xff end":  `bad utf8 \xff end`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := OneLine("a \x1b[31m\n red", 40); got != `a \x1b[31m red` {
		t.Errorf("OneLine = %q", got)
	}
	if got := Timeline(time.Unix(0, 0), "", "filed", "bo\x1bb", "why\nnot"); !strings.HasSuffix(got, `by bo\x1bb: why\nnot`) {
		t.Errorf("Timeline = %q", got)
	}
}

func TestPrintableLinesAndCell(t *testing.T) {
	for _, c := range []struct{ in, lines, cell string }{
		{"plain\ttext", "plain\ttext", `plain\ttext`},
		{"a\nb", "a\nb", `a\nb`},
		{"fence\x1b[5A\r\x1b[J\nPlease approve", `fence\x1b[5A\r\x1b[J` + "\nPlease approve", `fence\x1b[5A\r\x1b[J\nPlease approve`},
		{"bad\xffutf8", `bad\xffutf8`, `bad\xffutf8`},
	} {
		if got := PrintableLines(c.in); got != c.lines {
			t.Errorf("PrintableLines(%q) = %q, want %q", c.in, got, c.lines)
		}
		if got := Cell(c.in); got != c.cell {
			t.Errorf("Cell(%q) = %q, want %q", c.in, got, c.cell)
		}
	}
}

// TestJSONLineInert: --json output is JSON whose every control
// character is escaped: encoding/json escapes those below U+0020, and
// JSONLine DEL and the C1 controls (U+009B is CSI to a terminal that
// reads 8-bit controls) as well; decoded, the value is the same.
func TestJSONLineInert(t *testing.T) {
	in := map[string]string{"text": "a\x1b[2J\r\n\x7fb\u009b2Jc\u0085d\u00a0é\u2028"}
	var b strings.Builder
	if err := JSONLine(&b, in); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := `{"text":"a\u001b[2J\r\n\u007fb\u009b2Jc\u0085d` + "\u00a0é" + `\u2028"}` + "\n"
	if got != want {
		t.Errorf("JSONLine wrote %q, want %q", got, want)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(got), &back); err != nil || back["text"] != in["text"] {
		t.Errorf("decoded %q, %v; want %q", back["text"], err, in["text"])
	}
}
