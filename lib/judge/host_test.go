package judge

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/gobwas/glob"
)

// name253 is a host name of exactly 253 characters, the DNS limit,
// in labels of at most 63.
var name253 = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "example.com", want: "example.com"},
		{in: "EXAMPLE.Com.", want: "example.com"},
		{in: "BÜCHER.example.", want: "xn--bcher-kva.example"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "XN--BCHER-KVA.example", want: "xn--bcher-kva.example"},
		{in: "ａｂｃ.com", want: "abc.com"},
		{in: "faß.de", want: "xn--fa-hia.de"},
		{in: "1password.com", want: "1password.com"},
		{in: "r4---sn-4g5e6nzz.googlevideo.com", want: "r4---sn-4g5e6nzz.googlevideo.com"},
		{in: "localhost", want: "localhost"},
		{in: "127.0.0.1", want: "127.0.0.1"},
		{in: "127.0.0.1.", want: "127.0.0.1"},
		{in: "127。0。0。1", want: "127.0.0.1"},
		{in: "::1", want: "::1"},
		{in: "[::1]", want: "::1"},
		{in: "[2001:DB8:0:0::1]", want: "2001:db8::1"},
		{in: "[::ffff:127.0.0.1]", want: "127.0.0.1"},
		{in: "::FFFF:7f00:1", want: "127.0.0.1"},
		{in: "[::127.0.0.1]", want: "::7f00:1"},

		{in: "", err: `empty host`},
		{in: ".", err: `host ".": empty label`},
		{in: "a..b", err: `host "a..b": empty label`},
		{in: "example.com..", err: `host "example.com..": empty label`},
		{in: ".example.com", err: `host ".example.com": empty label`},
		{in: "2130706433", err: `host "2130706433": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "0x7f.1", err: `host "0x7f.1": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "0x7f000001", err: `host "0x7f000001": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "017700000001", err: `host "017700000001": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "127.1", err: `host "127.1": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "127.000.000.001", err: `host "127.000.000.001": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "1.2.3.4.5", err: `host "1.2.3.4.5": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "example.0x", err: `host "example.0x": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`},
		{in: "fe80::1%eth0", err: `host "fe80::1%eth0": IPv6 zones are refused`},
		{in: "[fe80::1%25eth0]", err: `host "fe80::1%25eth0": IPv6 zones are refused`},
		{in: "[1.2.3.4]", err: `host "[1.2.3.4]": brackets must hold an IPv6 address`},
		{in: "[::1", err: `host "[::1": brackets must hold an IPv6 address`},
		{in: "example.com:443", err: `host "example.com:443": not an IPv6 address`},
		{in: "a_b.example", err: `host "a_b.example": label "a_b" has a character other than a-z, 0-9 and hyphen`},
		{in: "-a.example", err: `host "-a.example": label "-a" starts or ends with a hyphen`},
		{in: "a b.example", err: `host "a b.example": label "a b" has a character other than a-z, 0-9 and hyphen`},
		{in: "user@example.com", err: `host "user@example.com": label "user@example" has a character other than a-z, 0-9 and hyphen`},
		{in: "*.example.com", err: `host "*.example.com": label "*" has a character other than a-z, 0-9 and hyphen`},
		{in: "exa%6dple.com", err: `host "exa%6dple.com": label "exa%6dple" has a character other than a-z, 0-9 and hyphen`},
		{in: "xn--zz.example", err: `host "xn--zz.example": label "xn--zz": idna: invalid label "zz"`},
		{in: "a\u200db.example", err: `host "a\u200db.example": idna: invalid label "a\u200db"`},
		{in: strings.Repeat("a", 64) + ".example", err: `host "` + strings.Repeat("a", 64) + `.example": label "aaaaaaaaaaaaaaaaaaaa"... longer than 63 characters`},
		{in: strings.Repeat("abcdefghi.", 26), err: `host "abcdefghi.abcdefghi.abcdefghi.abcdefghi."...: longer than 253 characters`},
		// The name limit: 253 characters, counted without the trailing dot.
		{in: name253, want: name253},
		{in: name253 + ".", want: name253},
		{in: strings.ToUpper(name253), want: name253},
		{in: name253 + "d", err: `host "` + name253[:40] + `"...: longer than 253 characters`},
		{in: name253 + "d.", err: `host "` + name253[:40] + `"...: longer than 253 characters`},
		// The ASCII edge: 0x7f is ASCII and fails as a character, 0x80
		// is not and goes through IDNA (which makes it U+FFFD).
		{in: "a\x7f.example", err: `host "a\x7f.example": label "a\x7f" has a character other than a-z, 0-9 and hyphen`},
		{in: "a\x80.example", err: "host \"a\\x80.example\": label \"xn--a-q10i\": idna: invalid label \"a\ufffd\""},
	}
	for _, tt := range tests {
		got, err := CanonicalHost(tt.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.err {
			t.Errorf("CanonicalHost(%q) = %q, %q; want %q, %q", tt.in, got, gotErr, tt.want, tt.err)
		}
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"example.com", "BÜCHER.example.", "127。0。0。1", "[::ffff:127.0.0.1]", "0x7f.1", "xn--bcher-kva.example", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		c, err := CanonicalHost(h)
		if err != nil {
			return
		}
		again, err := CanonicalHost(c)
		if err != nil || again != c {
			t.Fatalf("CanonicalHost(%q) = %q, but CanonicalHost(%q) = %q, %v", h, c, c, again, err)
		}
		if a, err := netip.ParseAddr(c); err == nil {
			if a.Zone() != "" || a.Is4In6() || a.String() != c {
				t.Fatalf("CanonicalHost(%q) = %q: not a canonical IP", h, c)
			}
			return
		}
		for i := 0; i < len(c); i++ {
			if ch := c[i]; !('a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '.') {
				t.Fatalf("CanonicalHost(%q) = %q: not lower-case LDH", h, c)
			}
		}
	})
}

func TestSpecial(t *testing.T) {
	tests := []struct {
		addr, class string
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"64:ff9b::7f00:1", "nat64 loopback"},
		{"64:ff9b::a9fe:a9fe", "nat64 link-local"},
		{"2002:7f00:1::1", "6to4 loopback"},
		{"2002:c0a8:101::", "6to4 private"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"fd12:3456::1", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"224.0.0.251", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"0.1.2.3", "this-network"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"2001:2::1", "benchmarking"},
		{"192.0.2.1", "documentation"},
		{"198.51.100.1", "documentation"},
		{"203.0.113.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"192.0.0.8", "ietf-protocol-assignments"},
		{"2001::1", "teredo"},
		{"fec0::1", "site-local"},
		{"100::1", "discard"},
		{"64:ff9b:1::1", "local-use-nat64"},
		{"::7f00:1", "reserved"},

		{"8.8.8.8", ""},
		{"93.184.216.34", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::", ""},
		{"2606:4700::1111", ""},
	}
	for _, tt := range tests {
		class, special := Special(mustAddr(tt.addr))
		if class != tt.class || special != (tt.class != "") {
			t.Errorf("Special(%s) = %q, %v; want %q", tt.addr, class, special, tt.class)
		}
	}
	if class, special := Special(netip.Addr{}); class != "invalid" || !special {
		t.Errorf("Special(invalid) = %q, %v", class, special)
	}
}

// globRegexp translates the glob syntax rules use (*, ?, [set], [!set],
// {a,b}, \c) into a regexp, as a reference for the glob library: its
// v0.2.3 matched "0*0" against "0".
func globRegexp(p string) (*regexp.Regexp, bool) {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	depth := 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '*':
			b.WriteString(`.*`)
		case c == '?':
			b.WriteString(`.`)
		case c == '{':
			depth++
			b.WriteString(`(?:`)
		case c == '}' && depth > 0:
			depth--
			b.WriteString(`)`)
		case c == ',' && depth > 0:
			b.WriteString(`|`)
		case c == '[':
			j := strings.IndexByte(p[i:], ']')
			set := p[i+1 : i+max(j, 1)]
			neg := strings.HasPrefix(set, "!")
			set = strings.TrimPrefix(set, "!")
			if j < 0 || set == "" || strings.Trim(set, "abcdefghijklmnopqrstuvwxyz0123456789_.-") != "" || strings.Contains(set, "-") && (len(set) != 3 || set[1] != '-' || set[0] > set[2]) {
				return nil, false
			}
			if neg {
				b.WriteString(`[^` + set + `]`)
			} else {
				b.WriteString(`[` + set + `]`)
			}
			i += j
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("_./-,", c) >= 0:
			b.WriteString(regexp.QuoteMeta(string(c)))
		default:
			return nil, false
		}
	}
	if depth != 0 {
		return nil, false
	}
	return regexp.MustCompile(b.String() + `$`), true
}

func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"0*0", "0"}, {"{a,}{a,}a", "a"}, {"get_*", "get_issue"}, {"{get,list}_*", "list_x"}, {"[a-c]?x*", "bzx"}, {"*_issue", "get_issue"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		want, ok := globRegexp(pattern)
		if !ok {
			return
		}
		g, err := glob.Compile(pattern)
		if err != nil {
			return
		}
		if got := g.Match(s); got != want.MatchString(s) {
			t.Fatalf("glob %q on %q: %v, reference says %v", pattern, s, got, !got)
		}
	})
}
