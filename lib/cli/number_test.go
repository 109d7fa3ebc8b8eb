package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestNumberFlags(t *testing.T) {
	newFS := func() (*flag.FlagSet, *time.Duration, *int, *int64, *time.Duration) {
		e, _, _ := newEnv()
		fs := e.FlagSet("run", "usage: impq run\n")
		rescan := PositiveDuration(fs, "rescan", 10*time.Second, "full rescan `INTERVAL`")
		workers := PositiveInt(fs, "workers", 4, "`N` at once")
		var body int64
		PositiveInt64Var(fs, &body, "max-body-bytes", 1<<20, "`BYTES`")
		grace := NonNegativeDuration(fs, "grace", 5*time.Second, "`DURATION` to finish")
		var header int
		AtLeastIntVar(fs, &header, "max-header-bytes", 1024, 4096, "`BYTES`")
		var budget int64
		NonNegativeInt64Var(fs, &budget, "body-budget", 0, "`BYTES`")
		return fs, rescan, workers, &body, grace
	}

	fs, rescan, workers, body, grace := newFS()
	if err := Parse(fs, nil); err != nil || *rescan != 10*time.Second || *workers != 4 || *body != 1<<20 || *grace != 5*time.Second {
		t.Errorf("defaults: %v %v %v %v %v", err, *rescan, *workers, *body, *grace)
	}
	fs, rescan, workers, body, grace = newFS()
	if err := Parse(fs, []string{"--rescan", "1ms", "--workers=1", "--max-body-bytes", "0x10", "--grace", "0", "x"}); err != nil ||
		*rescan != time.Millisecond || *workers != 1 || *body != 16 || *grace != 0 || fs.Arg(0) != "x" {
		t.Errorf("good values: %v %v %v %v %v", err, *rescan, *workers, *body, *grace)
	}

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--rescan", "0"}, `invalid value "0" for --rescan: must be positive`},
		{[]string{"--rescan", "-1s"}, `invalid value "-1s" for --rescan: must be positive`},
		{[]string{"--rescan=0s"}, `invalid value "0s" for --rescan: must be positive`},
		{[]string{"--workers", "0"}, `invalid value "0" for --workers: must be positive`},
		{[]string{"-workers", "-3"}, `invalid value "-3" for --workers: must be positive`},
		{[]string{"--max-body-bytes", "0"}, `invalid value "0" for --max-body-bytes: must be positive`},
		{[]string{"--grace", "-1s"}, `invalid value "-1s" for --grace: must be zero or more`},
		{[]string{"--max-header-bytes", "1023"}, `invalid value "1023" for --max-header-bytes: must be at least 1024`},
		{[]string{"--max-header-bytes", "1024", "--body-budget", "0"}, ""},
		{[]string{"--body-budget", "-1"}, `invalid value "-1" for --body-budget: must be zero or more`},
		// A later good value replaces a bad one, as for any flag.
		{[]string{"--workers", "0", "--workers", "2"}, ""},
	} {
		fs, _, _, _, _ := newFS()
		err := Parse(fs, c.args)
		var u *UsageError
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.msg != "" && (!errors.As(err, &u) || err.Error() != c.msg):
			t.Errorf("%q: %v, want usage error %q", c.args, err, c.msg)
		}
	}

	// What cannot be read is the flag package's parse error, as for its
	// own flags.
	for _, args := range [][]string{{"--workers", "x"}, {"--rescan", "soon"}, {"--max-body-bytes", "1.5"}} {
		fs, _, _, _, _ := newFS()
		var u *UsageError
		if err := Parse(fs, args); !errors.As(err, &u) || !strings.HasSuffix(err.Error(), ": parse error") {
			t.Errorf("%q: %v", args, err)
		}
	}

	// The help shows the defaults, as for the flag package's flags.
	e, out, _ := newEnv()
	fs = e.FlagSet("run", "usage: impq run\n")
	PositiveDuration(fs, "rescan", 10*time.Second, "full rescan `INTERVAL`")
	PositiveInt(fs, "workers", 4, "`N` at once")
	fs.Usage()
	if s := out.String(); !strings.Contains(s, "  --rescan INTERVAL  full rescan INTERVAL (default 10s)\n") || !strings.Contains(s, "  --workers N        N at once (default 4)\n") {
		t.Errorf("usage:\n%s", s)
	}
}
