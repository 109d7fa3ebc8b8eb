package notify

import (
	"strings"
	"testing"
)

// Fold tells of several gate-filed messages in one, under an id that
// counts the others, naming each gate with its intent, summary and link;
// one message is told as it is.
func TestFold(t *testing.T) {
	one := message()
	if f := Fold([]*Message{one}); f != one {
		t.Errorf("Fold of one message made %+v", f)
	}
	second := &Message{Schema: one.Schema, ID: "g-01m8qhxgdvttn3jf.1", Event: GateFiled, At: "2026-12-01T01:02:00Z", Imp: "yuko",
		Gate: "g-01m8qhxgdvttn3jf", Intent: "post", Summary: "text=hello", Link: "https://desk.example/g/g-01m8qhxgdvttn3jf"}
	third := &Message{Schema: one.Schema, ID: "g-01m8qhxgdvttn3jg.1", Event: GateFiled, At: "2026-12-01T01:03:00Z", Imp: "yuko",
		Gate: "g-01m8qhxgdvttn3jg", Intent: "post", Summary: "text=again"}
	f := Fold([]*Message{one, second, third})
	if f.ID != one.ID+"+2" || f.Count != 3 || f.At != one.At || f.Imp != "yuko" || f.Event != GateFiled || f.Schema != one.Schema {
		t.Errorf("folded %+v", f)
	}
	if strings.Join(f.Gates, " ") != one.Gate+" "+second.Gate+" "+third.Gate {
		t.Errorf("folded gates %v", f.Gates)
	}
	want := "yuko filed 3 gates that wait: g-01m8qhxgdvttn3je, g-01m8qhxgdvttn3jf, g-01m8qhxgdvttn3jg\n" +
		"gates: g-01m8qhxgdvttn3je email-send (" + one.Summary + "); " +
		"g-01m8qhxgdvttn3jf post (text=hello) https://desk.example/g/g-01m8qhxgdvttn3jf; " +
		"g-01m8qhxgdvttn3jg post (text=again)\n" +
		"id: g-01m8qhxgdvttn3je.1+2"
	if f.Text != want {
		t.Errorf("folded text:\n%s\nwant:\n%s", f.Text, want)
	}
}

// The owner's stop and its lifting name the imp they hold, or the whole
// yard; an event without a title of its own is named with its imp.
func TestTitles(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want string
	}{
		{Message{Event: Pause, Imp: "yuko"}, "pause: yuko"},
		{Message{Event: Pause}, "pause: the yard"},
		{Message{Event: Resume}, "resume: the yard"},
		{Message{Event: "something-new", Imp: "yuko"}, "something-new yuko"},
	} {
		if got := title(&tc.m); got != tc.want {
			t.Errorf("title of %+v = %q, want %q", tc.m, got, tc.want)
		}
	}
}

// A summary cut where no byte before the cut starts a rune (bytes that
// are not UTF-8) is cut to nothing but the mark, not past its start.
func TestCutWithoutARuneStart(t *testing.T) {
	if got := cut("\x80\x80\x80abc", 2); got != "…" {
		t.Errorf("cut = %q, want the mark alone", got)
	}
}
