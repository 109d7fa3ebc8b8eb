package cli

import (
	"errors"
	"testing"
)

type rec struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

func recs(rs ...rec) func(render func(rec) Line, emit func(Line) error) ([]error, error) {
	return func(render func(rec) Line, emit func(Line) error) ([]error, error) {
		for _, r := range rs {
			if err := emit(render(r)); err != nil {
				return []error{errors.New("/y/queue/x.json: damaged")}, err
			}
		}
		return []error{errors.New("/y/queue/x.json: damaged")}, nil
	}
}

// TestList prints a table aligned over every row, or JSON lines, warns of
// each file that could not be read, and returns an error that stopped
// the listing after warning.
func TestList(t *testing.T) {
	row := func(r rec) string { return r.ID + "\t" + r.Text }
	e, out, errb := newEnv()
	if err := List(e, false, "ID\tTEXT", row, recs(rec{"a", "one"}, rec{"bbbbbb", "two"})); err != nil {
		t.Fatal(err)
	}
	if want := "ID      TEXT\na       one\nbbbbbb  two\n"; out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	if want := "impq: warning: /y/queue/x.json: damaged\n"; errb.String() != want {
		t.Errorf("stderr %q, want %q", errb, want)
	}

	e, out, _ = newEnv()
	if err := List(e, true, "ID\tTEXT", row, recs(rec{"a", "one"}, rec{"b", "two"})); err != nil {
		t.Fatal(err)
	}
	if want := "{\"id\":\"a\",\"text\":\"one\"}\n{\"id\":\"b\",\"text\":\"two\"}\n"; out.String() != want {
		t.Errorf("json:\n%s\nwant:\n%s", out, want)
	}

	e, _, errb = newEnv()
	broken := errors.New("stopped")
	err := List(e, true, "", row, func(func(rec) Line, func(Line) error) ([]error, error) {
		return []error{errors.New("x: damaged")}, broken
	})
	if !errors.Is(err, broken) || errb.String() != "impq: warning: x: damaged\n" {
		t.Errorf("got %v, stderr %q; want the error returned after the warning", err, errb)
	}
}

// TestMeanwhile gives every caller f's one result, value and error, once
// f is done.
func TestMeanwhile(t *testing.T) {
	calls := 0
	broken := errors.New("unreadable")
	wait := Meanwhile(func() (int, error) {
		calls++
		return 7, broken
	})
	for range 2 {
		if v, err := wait(); v != 7 || !errors.Is(err, broken) {
			t.Errorf("got %d, %v; want 7, %v", v, err, broken)
		}
	}
	if calls != 1 {
		t.Errorf("f ran %d times, want once", calls)
	}
}
