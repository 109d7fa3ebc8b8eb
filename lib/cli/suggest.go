package cli

import (
	"sort"
	"strings"
)

// maxSuggestDistance is how far a misspelling may be from a command for
// the command to be suggested: beyond it, a guess is more often wrong
// than right.
const maxSuggestDistance = 2

// Distance is the edit distance between a and b: the insertions,
// deletions, substitutions and swaps of two adjacent characters that turn
// one into the other (optimal string alignment).
func Distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance between s[:i] and t[:j].
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// Nearest is the name in names closest to s, if it is at most
// maxSuggestDistance away and shares something with s; of equally close
// names, the first in order.
func Nearest(s string, names []string) (string, bool) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	best, bestD := "", maxSuggestDistance+1
	for _, n := range sorted {
		// A distance as long as the longer word replaces everything:
		// "xy" is not a misspelt "ls".
		if d := Distance(s, n); d < bestD && d < max(len([]rune(s)), len([]rune(n))) {
			best, bestD = n, d
		}
	}
	return best, best != ""
}

// UnknownCommand is the usage error for a command that is not one of
// names: one line with the nearest of them, or all of them when none is
// near.
func UnknownCommand(name string, names []string) error {
	names = append([]string(nil), names...)
	sort.Strings(names)
	if near, ok := Nearest(name, names); ok {
		return Usagef("unknown command %q; did you mean %q?", name, near)
	}
	return Usagef("unknown command %q; commands: %s", name, strings.Join(names, ", "))
}
