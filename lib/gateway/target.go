package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
)

// target is where a request goes, canonical and ready to judge.
type target struct {
	protocol string // "http" or "https"
	host     string // judge.CanonicalHost form
	port     int
	path     string // normalised, starts with "/"
	query    string // raw, without the "?"
}

func badRequest(format string, a ...any) *http1.Error {
	return &http1.Error{Status: http.StatusBadRequest, Reason: fmt.Sprintf(format, a...)}
}

func defaultPort(protocol string) int {
	if protocol == "https" {
		return 443
	}
	return 80
}

// hostPort is the authority for the upstream URL and Host header, with the
// port only when it is not the protocol's default.
func (t *target) hostHeader() string {
	h := t.host
	if strings.IndexByte(h, ':') >= 0 {
		h = "[" + h + "]"
	}
	if t.port != defaultPort(t.protocol) {
		h += ":" + strconv.Itoa(t.port)
	}
	return h
}

// url is the target as one string, for placeholder scanning and messages.
func (t *target) url() string {
	u := t.protocol + "://" + t.hostHeader() + t.path
	if t.query != "" {
		u += "?" + t.query
	}
	return u
}

// parseAbsolute reads an absolute-form request target.
func parseAbsolute(raw string) (target, error) {
	var t target
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok:
		return t, badRequest("request target %q is not an absolute http or https URL", clip(raw))
	case strings.EqualFold(scheme, "http"):
		t.protocol = "http"
	case strings.EqualFold(scheme, "https"):
		t.protocol = "https"
	default:
		return t, badRequest("scheme %q is not http or https", clip(scheme))
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	var err error
	if t.host, t.port, err = parseAuthority(authority, defaultPort(t.protocol)); err != nil {
		return t, err
	}
	if err := t.setPath(rest[end:]); err != nil {
		return t, err
	}
	return t, nil
}

// parseOrigin reads an origin-form request target for the given host.
func parseOrigin(raw string, protocol, host string, port int) (target, error) {
	t := target{protocol: protocol, host: host, port: port}
	if !strings.HasPrefix(raw, "/") {
		return t, badRequest("request target %q is not a path", clip(raw))
	}
	return t, t.setPath(raw)
}

func (t *target) setPath(pq string) error {
	if strings.IndexByte(pq, '#') >= 0 {
		return badRequest("fragment in request target")
	}
	path, query, _ := strings.Cut(pq, "?")
	if path == "" {
		path = "/"
	}
	if path[0] != '/' {
		return badRequest("request path does not start with /")
	}
	if strings.HasPrefix(path, "//") {
		// A request line "GET //host/x" reads as a network-path reference
		// to some servers: another host than the one judged.
		return badRequest("request path starts with //")
	}
	p, err := normalisePath(path)
	if err != nil {
		return err
	}
	t.path, t.query = p, query
	return nil
}

// parseAuthority splits host[:port] and canonicalises the host; port 0
// means the port is required.
func parseAuthority(a string, dflt int) (string, int, error) {
	if a == "" {
		return "", 0, badRequest("empty host in request target")
	}
	if strings.IndexByte(a, '@') >= 0 {
		return "", 0, badRequest("user information in request target")
	}
	host, portText := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, badRequest("unclosed [ in host %q", clip(a))
		}
		host, portText = a[:end+1], a[end+1:]
		if portText != "" {
			if portText[0] != ':' {
				return "", 0, badRequest("malformed host %q", clip(a))
			}
			portText = portText[1:]
			if portText == "" {
				return "", 0, badRequest("empty port in %q", clip(a))
			}
		}
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		host, portText = a[:i], a[i+1:]
		if portText == "" {
			return "", 0, badRequest("empty port in %q", clip(a))
		}
	}
	port := dflt
	if portText != "" {
		p, err := parsePort(portText)
		if err != nil {
			return "", 0, err
		}
		port = p
	}
	if port == 0 {
		return "", 0, badRequest("no port in %q", clip(a))
	}
	canon, err := judge.CanonicalHost(host)
	if err != nil {
		return "", 0, badRequest("host %q: %v", clip(host), err)
	}
	return canon, port, nil
}

func parsePort(s string) (int, error) {
	if len(s) > 5 {
		return 0, badRequest("port %q out of range", clip(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, badRequest("malformed port %q", clip(s))
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 1 || n > 65535 {
		return 0, badRequest("port %d out of range 1-65535", n)
	}
	return n, nil
}

// normalisePath refuses paths that servers disagree about (dot segments,
// even escaped or behind an escaped slash, a backslash or an escaped NUL;
// the judge denies a dot segment before a ;parameter) and returns the rest in judge.NormalPath's form, which
// is what is judged and what is forwarded: escapes of unreserved
// characters decoded, other escapes upper-cased, runs of slashes
// collapsed, so a rule on "/admin" also sees "/%61dmin" and "/admin//".
func normalisePath(p string) (string, error) {
	var stack [256]byte
	decoded := stack[:0]
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			return "", badRequest("backslash in request path")
		case c == '%':
			if i+2 >= len(p) || unhex(p[i+1]) < 0 || unhex(p[i+2]) < 0 {
				return "", badRequest("malformed percent escape in request path")
			}
			v := byte(unhex(p[i+1])<<4 | unhex(p[i+2]))
			i += 2
			switch v {
			case 0:
				return "", badRequest("escaped NUL in request path")
			case '\\':
				return "", badRequest("escaped backslash in request path")
			}
			decoded = append(decoded, v)
		default:
			decoded = append(decoded, c)
		}
	}
	for rest := decoded; ; {
		seg := rest
		i := bytes.IndexByte(rest, '/')
		if i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		}
		if string(seg) == "." || string(seg) == ".." {
			return "", badRequest("dot segment in request path")
		}
		if i < 0 {
			break
		}
	}
	return judge.NormalPath(p), nil
}

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

// sameHost checks a Host header against the target it must name: same
// canonical host, and the same port when it gives one.
func sameHost(hostHeader string, t *target) error {
	h, p, err := parseAuthority(hostHeader, t.port)
	if err != nil {
		var he *http1.Error
		if errors.As(err, &he) {
			return fmt.Errorf("the Host header %q: %s", clip(hostHeader), he.Reason)
		}
		return err
	}
	if h != t.host || p != t.port {
		return fmt.Errorf("the Host header %q does not name the target %s:%d (domain fronting)", clip(hostHeader), t.host, t.port)
	}
	return nil
}

// clip bounds a client-supplied string quoted in a reason.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
