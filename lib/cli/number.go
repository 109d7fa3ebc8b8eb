package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// A number flag refuses, after parsing, a value below its least: "--rescan
// 0" or "--workers -1" is a usage error that names the flag and the value,
// never a panic or a busy loop further on.
type number[T int | int64 | time.Duration] struct {
	p     *T
	least T
	what  string // "positive", "zero or more"
	raw   string // the value as given
	set   bool
	parse func(string) (T, error)
}

// errParse is what the flag package says of a value it cannot read.
var errParse = errors.New("parse error")

func (n *number[T]) String() string {
	if n == nil || n.p == nil {
		return ""
	}
	if d, ok := any(*n.p).(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(*n.p)
}

func (n *number[T]) Set(s string) error {
	v, err := n.parse(s)
	if err != nil {
		return errParse
	}
	*n.p, n.raw, n.set = v, s, true
	return nil
}

// check is called by Parse for every flag given.
func (n *number[T]) check(name string) error {
	if n.set && *n.p < n.least {
		return Usagef("invalid value %q for --%s: must be %s", n.raw, name, n.what)
	}
	return nil
}

type checker interface{ check(name string) error }

func parseInt(s string) (int, error) {
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	return int(v), err
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) }

// PositiveDurationVar defines a duration flag that must be more than zero.
func PositiveDurationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(&number[time.Duration]{p: p, least: 1, what: "positive", parse: time.ParseDuration}, name, usage)
}

// PositiveDuration defines a duration flag that must be more than zero.
func PositiveDuration(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	PositiveDurationVar(fs, p, name, def, usage)
	return p
}

// NonNegativeDuration defines a duration flag that may be zero (none at
// all) but not negative.
func NonNegativeDuration(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = def
	fs.Var(&number[time.Duration]{p: p, least: 0, what: "zero or more", parse: time.ParseDuration}, name, usage)
	return p
}

// PositiveIntVar defines an int flag that must be more than zero.
func PositiveIntVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(&number[int]{p: p, least: 1, what: "positive", parse: parseInt}, name, usage)
}

// PositiveInt defines an int flag that must be more than zero.
func PositiveInt(fs *flag.FlagSet, name string, def int, usage string) *int {
	p := new(int)
	PositiveIntVar(fs, p, name, def, usage)
	return p
}

// AtLeastIntVar defines an int flag that must be least or more.
func AtLeastIntVar(fs *flag.FlagSet, p *int, name string, least, def int, usage string) {
	*p = def
	fs.Var(&number[int]{p: p, least: least, what: fmt.Sprintf("at least %d", least), parse: parseInt}, name, usage)
}

// NonNegativeInt64Var defines an int64 flag that may be zero but not
// negative.
func NonNegativeInt64Var(fs *flag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var(&number[int64]{p: p, least: 0, what: "zero or more", parse: parseInt64}, name, usage)
}

// PositiveInt64Var defines an int64 flag that must be more than zero.
func PositiveInt64Var(fs *flag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var(&number[int64]{p: p, least: 1, what: "positive", parse: parseInt64}, name, usage)
}

// checkNumbers is the first refusal of a number flag given in fs.
func checkNumbers(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if c, ok := f.Value.(checker); ok && err == nil {
			err = c.check(f.Name)
		}
	})
	return err
}
