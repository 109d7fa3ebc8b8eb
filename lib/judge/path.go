package judge

import "strings"

// Path rules see a path in one normal form, so that spellings a server
// takes for the same path match the same rules (RFC 3986 6.2.2):
//
//   - an escape of an unreserved character is decoded (%41 is A, %7E is ~),
//     any other escape's hex digits are upper-cased (%2f is %2F);
//   - runs of slashes collapse to one (/a//b is /a/b), as most servers
//     and frameworks treat them;
//   - dot segments are never removed: a path with one has a traversal
//     spelling, which no path rule matches (and the gateway refuses).
//
// ;parameters in a segment are read two ways, since servers disagree:
// some (Tomcat, Jetty, Spring) drop them, so /a;x/b is /a/b, others keep
// them as part of the segment. A deny rule's pathPrefix matches if it
// holds either way; an allow rule's only if it holds both ways. So a
// deny carve-out catches /allowed/;x/admin and /allowed/admin;x, and an
// allow for /public/ never lets /public;x/../ or /pub;x/lic/ through.
//
// Matching is case-sensitive: /Admin is not /admin.

// NormalPath returns p in the normal form path rules see. It is
// idempotent; the % of a malformed escape becomes %25.
func NormalPath(p string) string {
	if !strings.Contains(p, "%") && !strings.Contains(p, "//") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%' && i+2 < len(p) && unhex(p[i+1]) >= 0 && unhex(p[i+2]) >= 0:
			v := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			if unreserved(v) {
				c = v
				i += 2
				break
			}
			b.WriteByte('%')
			b.WriteByte(upperHex[v>>4])
			b.WriteByte(upperHex[v&0xf])
			i += 2
			continue
		case c == '%':
			// A stray % is escaped, so that what follows it can never
			// become an escape on a second pass ("%%34%31" is not "A").
			b.WriteString("%25")
			continue
		}
		if c == '/' && strings.HasSuffix(b.String(), "/") {
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// bareSegments drops the ;parameters of every segment of a normal path
// and collapses the slashes that leaves.
func bareSegments(p string) string {
	if !strings.Contains(p, ";") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == ';' {
			for i+1 < len(p) && p[i+1] != '/' {
				i++
			}
			continue
		}
		if p[i] == '/' && strings.HasSuffix(b.String(), "/") {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
