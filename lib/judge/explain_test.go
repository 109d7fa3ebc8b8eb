package judge

import (
	"reflect"
	"strings"
	"testing"
)

// The reasons Explain gives for the fields TestExplain does not reach: a
// port, a header that is missing altogether, and values long enough to be
// cut when quoted.
func TestExplainMoreReasons(t *testing.T) {
	p := policy(t,
		`{"name":"alt-ports","match":{"port":[8080,8443]},"verdict":"allow"}`,
		`{"name":"keyed","match":{"headerContains":{"x-key":""}},"verdict":"allow"}`,
		`{"name":"v2","match":{"pathPrefix":"/v2/"},"verdict":"allow"}`,
	)
	r := base()
	r.Path = "/" + strings.Repeat("p", 80)
	want := []Trace{
		{Rule: "alt-ports", Why: "port 443 not in [8080 8443]"},
		{Rule: "keyed", Why: "no header x-key"},
		{Rule: "v2", Why: `path "/` + strings.Repeat("p", 63) + `"... has no prefix in [/v2/]`},
	}
	if got := p.Explain(r); !reflect.DeepEqual(got, want) {
		t.Errorf("Explain:\n got: %+v\nwant: %+v", got, want)
	}
	// A path of exactly 64 bytes is quoted whole.
	r.Path = "/" + strings.Repeat("p", 63)
	if got := p.Explain(r); got[2].Why != `path "/`+strings.Repeat("p", 63)+`" has no prefix in [/v2/]` {
		t.Errorf("64-byte path: %q", got[2].Why)
	}
}
