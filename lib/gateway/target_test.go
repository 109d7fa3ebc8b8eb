package gateway

import (
	"strconv"
	"strings"
	"testing"
)

func itoa(n int) string { return strconv.Itoa(n) }

func TestParseAbsolute(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // protocol host port path query, or "error"
	}{
		{"http://Example.COM./a?b=1", "http example.com 80 /a b=1"},
		{"HTTPS://example.com:8443", "https example.com 8443 / "},
		{"http://[::ffff:127.0.0.1]:81/", "http 127.0.0.1 81 / "},
		{"http://[2001:DB8::1]/x", "http 2001:db8::1 80 /x "},
		{"http://b\xc3\xbccher.example/", "http xn--bcher-kva.example 80 / "},
		{"http://xn--bcher-kva.example/%7Euser/%61b%2F%2f", "http xn--bcher-kva.example 80 /~user/ab%2F%2F "},
		{"http://a.example/?q=%2e%2e/..", "http a.example 80 / q=%2e%2e/.."},
		{"ftp://a.example/", "error"},
		{"http://u@a.example/", "error"},
		{"http://a.example:0/", "error"},
		{"http://a.example:65536/", "error"},
		{"http://a.example:/", "error"},
		{"http://a.example:8o/", "error"},
		{"http:///x", "error"},
		{"http://[::1/", "error"},
		{"http://a.example/x#f", "error"},
		{"http://a.example/a/./b", "error"},
		{"http://a.example/a/..", "error"},
		{"http://a.example/.", "error"},
		{"http://a.example/..?x", "error"},
		{"http://a.example/" + strings.Repeat("long/", 60) + "%2e%2E/x", "error"},
		{"http://a.example/" + strings.Repeat("long/", 60) + "x..", "http a.example 80 /" + strings.Repeat("long/", 60) + "x.. "},
		{"http://a.example/a../.b", "http a.example 80 /a../.b "},
		{"http://a.example/a/%2E%2e/b", "error"},
		{"http://a.example/a%2f..%2fb", "error"},
		{"http://a.example/a\\b", "error"},
		{"http://a.example/a%5cb", "error"},
		{"http://a.example/a%00", "error"},
		{"http://a.example/a%g0", "error"},
		{"http://a.example//b", "error"},
		{"http://2130706433/", "error"},
		{"http://127.1/", "error"},
	} {
		got, err := parseAbsolute(tc.raw)
		s := "error"
		if err == nil {
			s = got.protocol + " " + got.host + " " + strconv.Itoa(got.port) + " " + got.path + " " + got.query
		}
		if s != tc.want {
			t.Errorf("%q: got %q (%v), want %q", tc.raw, s, err, tc.want)
		}
	}
}

func TestSameHost(t *testing.T) {
	tg := &target{protocol: "https", host: "api.example", port: 8443}
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"api.example", true}, {"API.Example.", true}, {"api.example:8443", true}, {"api.example:443", false}, {"evil.example", false}, {"api.example@evil", false}} {
		if err := sameHost(tc.host, tg); (err == nil) != tc.ok {
			t.Errorf("Host %q: %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
}
