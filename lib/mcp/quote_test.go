package mcp

import (
	"strings"
	"testing"
)

// A key named in an error is quoted, and cut after 64 bytes so a hostile
// body cannot fill the record with it.
func TestUnknownKeyQuoted(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{strings.Repeat("k", 64), `"` + strings.Repeat("k", 64) + `"`},
		{strings.Repeat("k", 65), `"` + strings.Repeat("k", 64) + `"...`},
		{"a\nb", `"a\nb"`},
	} {
		body := `{"jsonrpc":"2.0","id":1,"method":"ping","` + strings.ReplaceAll(c.key, "\n", `\n`) + `":1}`
		_, err := Lift("application/json", []byte(body))
		if want := "JSON-RPC request has unknown key " + c.want; err == nil || err.Error() != want {
			t.Errorf("key of %d bytes: %v, want %s", len(c.key), err, want)
		}
	}
}
