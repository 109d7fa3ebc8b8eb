package judge

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// CanonicalHost returns the one spelling of a request host that the
// judge matches and the gateway dials: lower-case ASCII (IDNA Lookup
// profile for non-ASCII names), without the trailing dot, or an IP
// literal in netip form (IPv4-mapped IPv6 unmapped, brackets removed).
//
// It refuses what would let two spellings reach one destination, or one
// spelling reach two: IPv6 zones, empty labels, characters outside
// letters, digits and hyphen, over-long names, and numeric names other
// than a plain dotted quad (2130706433, 0x7f.1, 017700000001, 127.1 are
// all 127.0.0.1 to some resolvers).
func CanonicalHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty host")
	}
	if inner, ok := strings.CutPrefix(h, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok || !strings.Contains(inner, ":") {
			return "", fmt.Errorf("host %q: brackets must hold an IPv6 address", h)
		}
		return canonicalIP(inner)
	}
	if strings.Contains(h, ":") {
		return canonicalIP(h)
	}
	s := strings.ToLower(h)
	if !isASCII(h) {
		var err error
		if s, err = idna.Lookup.ToASCII(h); err != nil {
			return "", fmt.Errorf("host %q: %w", h, err)
		}
	}
	s = strings.TrimSuffix(s, ".")
	if len(s) > 253 {
		return "", fmt.Errorf("host %.40q...: longer than 253 characters", h)
	}
	for l := range strings.SplitSeq(s, ".") {
		if err := checkLabel(l); err != nil {
			return "", fmt.Errorf("host %q: %w", h, err)
		}
	}
	if numeric(s[strings.LastIndexByte(s, '.')+1:]) {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			return a.String(), nil
		}
		return "", fmt.Errorf("host %q: ambiguous numeric host (only a plain dotted quad is an IPv4 address)", h)
	}
	return s, nil
}

func canonicalIP(s string) (string, error) {
	if strings.Contains(s, "%") {
		return "", fmt.Errorf("host %q: IPv6 zones are refused", s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return "", fmt.Errorf("host %q: not an IPv6 address", s)
	}
	return a.Unmap().String(), nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %.20q... longer than 63 characters", l)
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("label %q has a character other than a-z, 0-9 and hyphen", l)
		}
	}
	if strings.HasPrefix(l, "xn--") {
		// A punycode label must decode, or it is not the name it claims.
		if _, err := idna.Lookup.ToUnicode(l); err != nil {
			return fmt.Errorf("label %q: %w", l, err)
		}
	}
	return nil
}

// numeric is the WHATWG URL test for a label that makes a host an IPv4
// number: decimal digits, or 0x followed by hex digits.
func numeric(l string) bool {
	digits := "0123456789"
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		l, digits = rest, "0123456789abcdef"
	} else if l == "" {
		return false
	}
	for i := 0; i < len(l); i++ {
		if !strings.ContainsRune(digits, rune(l[i])) {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

type special struct {
	prefix netip.Prefix
	class  string
}

// specials lists non-public destinations, narrow prefixes before the wide
// ones that contain them.
var specials = func() []special {
	list := []struct{ prefix, class string }{
		{"0.0.0.0/32", "unspecified"},
		{"0.0.0.0/8", "this-network"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "cgnat"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "ietf-protocol-assignments"},
		{"192.0.2.0/24", "documentation"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "benchmarking"},
		{"198.51.100.0/24", "documentation"},
		{"203.0.113.0/24", "documentation"},
		{"224.0.0.0/4", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved"},
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"64:ff9b:1::/48", "local-use-nat64"},
		{"::/8", "reserved"}, // IPv4-compatible, IPv4-translated and unassigned
		{"100::/64", "discard"},
		{"2001::/32", "teredo"},
		{"2001:2::/48", "benchmarking"},
		{"2001:db8::/32", "documentation"},
		{"3fff::/20", "documentation"},
		{"fc00::/7", "private"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local"},
		{"ff00::/8", "multicast"},
	}
	out := make([]special, len(list))
	for i, s := range list {
		out[i] = special{netip.MustParsePrefix(s.prefix), s.class}
	}
	return out
}()

var (
	prefix6to4  = netip.MustParsePrefix("2002::/16")
	prefixNAT64 = netip.MustParsePrefix("64:ff9b::/96")
)

// Special classifies an address that is not a public destination:
// loopback, private, link-local and the like, including IPv6 forms that
// reach an IPv4 address which is itself special (IPv4-mapped, 6to4,
// NAT64). An invalid address is special ("invalid"): unknown is never
// public.
func Special(a netip.Addr) (class string, special bool) {
	if !a.IsValid() {
		return "invalid", true
	}
	a = a.WithZone("").Unmap()
	// Checked before ::/8, which contains the NAT64 prefix.
	if prefixNAT64.Contains(a) {
		b := a.As16()
		if class, ok := Special(netip.AddrFrom4([4]byte(b[12:]))); ok {
			return "nat64 " + class, true
		}
		return "", false
	}
	if prefix6to4.Contains(a) {
		b := a.As16()
		if class, ok := Special(netip.AddrFrom4([4]byte(b[2:6]))); ok {
			return "6to4 " + class, true
		}
		return "", false
	}
	for _, s := range specials {
		if s.prefix.Contains(a) {
			return s.class, true
		}
	}
	return "", false
}
