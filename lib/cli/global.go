package cli

import (
	"maps"
	"slices"
	"strings"
)

// GlobalFlags are the flags every command takes that may also come before
// the subcommand, as git -C does (impq --root D ls): each name, and
// whether it takes a value.
var GlobalFlags = map[string]bool{"root": true, "color": true, "timeout": true, "json": false}

// Hoist moves the global flags (GlobalFlags) that come before the
// subcommand to after its arguments, ahead of any "--", where the
// subcommand's own flag set parses them as if written there. Any other
// flag before the subcommand is a usage error naming the global ones;
// -h, --help and --version stay where they are, for Dispatch.
func Hoist(args []string) ([]string, error) {
	var moved []string
	i := 0
	for i < len(args) {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" || slices.Contains([]string{"-h", "-help", "--help", "-version", "--version"}, a) {
			break
		}
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, ok := GlobalFlags[name]
		if !ok {
			return nil, Usagef("flag %s goes after the command; before it only %s", a, globalNames())
		}
		moved = append(moved, a)
		i++
		if takesValue && !inline {
			if i == len(args) {
				return nil, Usagef("flag needs an argument: %s", a)
			}
			moved = append(moved, args[i])
			i++
		}
	}
	if len(moved) == 0 {
		return args, nil
	}
	rest := args[i:]
	if len(rest) == 0 {
		return nil, Usagef("global flags %s name no command", strings.Join(moved, " "))
	}
	end := slices.Index(rest, "--")
	if end < 0 {
		end = len(rest)
	}
	return slices.Concat(rest[:end], moved, rest[end:]), nil
}

func globalNames() string {
	var names []string
	for _, n := range slices.Sorted(maps.Keys(GlobalFlags)) {
		names = append(names, "--"+n)
	}
	return strings.Join(names, ", ")
}
