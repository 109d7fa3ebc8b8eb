package judge

import (
	"reflect"
	"strings"
	"testing"
)

func TestNormalPath(t *testing.T) {
	for _, tc := range [][2]string{
		{"/", "/"},
		{"/a/b", "/a/b"},
		{"/%41%7e%2d", "/A~-"},
		{"/%2f%3a%25", "/%2F%3A%25"},
		{"//a///b//", "/a/b/"},
		{"/a;x/b", "/a;x/b"},
		{"/%%34%31", "/%2541"},
		{"/a%", "/a%25"},
		{"/a%4", "/a%254"},
		// Each edge of each unreserved range is decoded; the byte one
		// past it keeps its escape, upper-cased.
		{"/%61%7a%7A", "/azz"},
		{"/%60%7b", "/%60%7B"},
		{"/%41%5a%5A", "/AZZ"},
		{"/%40%5b", "/%40%5B"},
		{"/%30%39", "/09"},
		{"/%2f%3a", "/%2F%3A"},
		// The other unreserved characters, and their neighbours.
		{"/%2d%2e%5f%7e", "/-._~"},
		{"/%2c%5e%7f", "/%2C%5E%7F"},
	} {
		if got := NormalPath(tc[0]); got != tc[1] {
			t.Errorf("NormalPath(%q) = %q, want %q", tc[0], got, tc[1])
		}
	}
	for _, tc := range [][2]string{
		{"/a;x/b", "/a/b"},
		{"/a/;x/b", "/a/b"},
		{"/a/b;x", "/a/b"},
		{"/;x", "/"},
		{"/a;x;y/b;z/", "/a/b/"},
	} {
		if got := bareSegments(tc[0]); got != tc[1] {
			t.Errorf("bareSegments(%q) = %q, want %q", tc[0], got, tc[1])
		}
	}
}

// carveOut is the policy of the finding: /allowed/ is open, its admin
// pages are not.
const carveOut = `{"name":"admin","match":{"host":"api.example.com","pathPrefix":"/allowed/admin"},"verdict":"deny"},
	{"name":"allowed","match":{"host":"api.example.com","pathPrefix":"/allowed/"},"verdict":"allow"}`

func TestPathSpellings(t *testing.T) {
	p := policy(t, carveOut)
	for _, tc := range []struct {
		path string
		rule string // "" for no rule (the default deny)
	}{
		{"/allowed/news", "allowed"},
		{"/allowed/admin", "admin"},
		{"/allowed//admin", "admin"},
		{"/allowed///admin/users", "admin"},
		{"//allowed/admin", "admin"},
		{"/allowed/%61dmin", "admin"},
		{"/allowed/%61%64%6D%69%6E", "admin"},
		{"/allowed/;x/admin", "admin"},
		{"/allowed/admin;x", "admin"},
		{"/allowed;x/admin", "admin"},
		{"/allowed/news;v=1", "allowed"},
		// An allow holds only if the path has its prefix read both ways.
		{"/allow;x/ed/news", ""},
		{"/allowed;x/news", ""},
		// Case-sensitive: /Admin is another path.
		{"/allowed/Admin", "allowed"},
	} {
		d := p.Judge(&Request{Protocol: "https", Method: "GET", Host: "api.example.com", Port: 443, Path: tc.path})
		if d.Rule != tc.rule {
			t.Errorf("%s: rule %q (%s), want %q", tc.path, d.Rule, d.Reason, tc.rule)
		}
	}
}

// FuzzNormalPath checks that normalisation is idempotent and that a path
// and its normal form are judged the same.
func FuzzNormalPath(f *testing.F) {
	for _, s := range []string{"/allowed//admin", "/allowed/%61dmin", "/allowed/;x/admin", "/a%%34%31", "/%2F/;/", "//x;y//z%7e"} {
		f.Add(s)
	}
	p := policy(f, carveOut, `{"name":"tilde","match":{"host":"api.example.com","pathPrefix":"/~u/"},"verdict":"allow"}`)
	f.Fuzz(func(t *testing.T, path string) {
		n := NormalPath(path)
		if again := NormalPath(n); again != n {
			t.Fatalf("NormalPath(%q) = %q, but NormalPath of that is %q", path, n, again)
		}
		if b := bareSegments(n); bareSegments(b) != b || strings.Contains(b, "//") || strings.Contains(b, ";") {
			t.Fatalf("bareSegments(%q) = %q: not a fixed point", n, b)
		}
		if !strings.HasPrefix(path, "/") {
			return
		}
		judge := func(p0 string) Decision {
			return p.Judge(&Request{Protocol: "https", Method: "GET", Host: "api.example.com", Port: 443, Path: p0})
		}
		if a, b := judge(path), judge(n); !reflect.DeepEqual(a, b) {
			t.Fatalf("%q judged %+v, its normal form %q judged %+v", path, a, n, b)
		}
	})
}
