// Package complete lists the names a shell completes on an impyard
// command line, read from the yard at the time: task and gate ids as the
// listings show them, and imp names. The commands pass Names to
// cli.Env.Names, which answers their completion scripts.
package complete

import (
	"slices"
	"strings"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// The kinds of names (cli.Values.Kind). A task's or a gate's may add
// ":STATE,..." for only those in the states its command takes
// ("task:failed" for impq retry); without, every id is listed, unread.
const (
	Imp  = "imp"
	Task = "task"
	Gate = "gate"
)

// Kind is kind with only the states given, for cli.Names.
func Kind(kind string, states ...string) string {
	if len(states) == 0 {
		return kind
	}
	return kind + ":" + strings.Join(states, ",")
}

// Names lists the names of kind that begin with word in the yard at root
// ("" for the default yard). An id is the abbreviation a listing shows on
// a terminal when word begins it, else the whole id (a word longer than
// the abbreviation, as pasted). There are none when the yard is absent or
// cannot be read: a completion says nothing of errors, which the command
// itself reports when run.
func Names(root, kind, word string) []cli.Name {
	y, err := yard.Open(root)
	if err != nil {
		return nil
	}
	kind, list, _ := strings.Cut(kind, ":")
	var states []string
	if list != "" {
		states = strings.Split(list, ",")
	}
	switch kind {
	case Imp:
		return imps(y, word)
	case Task:
		return tasks(y, states, word)
	case Gate:
		return gates(y, states, word)
	}
	return nil
}

func imps(y *yard.Yard, word string) []cli.Name {
	names, err := config.ImpNames(y)
	if err != nil {
		return nil
	}
	var out []cli.Name
	for _, n := range names {
		if strings.HasPrefix(n, word) && id.CheckName(n) == nil {
			out = append(out, cli.Name{Word: n})
		}
	}
	return out
}

// pick is the form of the id full to complete word with, or "" when
// word begins neither the abbreviation nor the id.
func pick(full, short, word string) string {
	switch {
	case short != "" && strings.HasPrefix(short, word):
		return short
	case strings.HasPrefix(full, word):
		return full
	}
	return ""
}

// every is each of ids word may name, in order, as pick words it.
func every(ids []string, shorts map[string]string, word string) []cli.Name {
	slices.Sort(ids)
	var out []cli.Name
	for _, i := range ids {
		if w := pick(i, shorts[i], word); w != "" {
			out = append(out, cli.Name{Word: w})
		}
	}
	return out
}

func tasks(y *yard.Yard, states []string, word string) []cli.Name {
	ids, err := queue.IDs(y)
	return named(ids, err, states, word, func(fn func(*queue.Task) error) {
		queue.Each(y, queue.Filter{}, fn)
	}, func(t *queue.Task) (string, string, string) {
		return t.ID, t.State, t.Imp + " " + t.State + ": " + t.Text
	})
}

func gates(y *yard.Yard, states []string, word string) []cli.Name {
	ids, err := gate.IDs(y)
	// Only a filed gate is in gates/pending; any other state needs the
	// decided ones read too.
	all := slices.ContainsFunc(states, func(s string) bool { return s != state.Filed })
	return named(ids, err, states, word, func(fn func(*gate.Gate) error) {
		gate.Each(y, gate.Filter{All: all}, fn)
	}, func(g *gate.Gate) (string, string, string) {
		return g.ID, g.State, g.Imp + " " + g.Intent + ": " + g.Rationale
	})
}

// named is what word may name of records with ids (listed with err), by
// the abbreviations listings show: every id when states is empty, else
// the records each reads whose state is one of states, each with what
// about says of it beside its id and state.
func named[R any](ids []string, err error, states []string, word string, each func(fn func(R) error), about func(R) (rid, st, text string)) []cli.Name {
	if err != nil {
		return nil
	}
	// Abbreviations unique among every record, as the listings show them.
	shorts := id.Shortest(ids)
	if len(states) == 0 {
		return every(ids, shorts, word)
	}
	var out []cli.Name
	each(func(r R) error {
		i, st, text := about(r)
		if w := pick(i, shorts[i], word); w != "" && slices.Contains(states, st) {
			out = append(out, cli.Name{Word: w, About: text})
		}
		return nil
	})
	return out
}
