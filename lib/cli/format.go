package cli

import (
	"fmt"
	"strings"
	"time"
)

// Age renders how long ago t was, in one short unit.
func Age(now, t time.Time) string {
	d := now.Sub(t)
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

// OneLine squeezes s onto one line of at most n characters.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Timeline renders one transition as a line of a human timeline.
func Timeline(at time.Time, from, to, by, why string) string {
	if from == "" {
		from = "-"
	}
	s := fmt.Sprintf("%s  %-12s -> %-12s by %s", at.Local().Format(time.RFC3339), from, to, by)
	if why != "" {
		s += ": " + why
	}
	return s
}
