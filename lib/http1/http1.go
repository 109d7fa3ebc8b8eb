// Package http1 reads HTTP/1.1 requests from untrusted clients strictly and
// writes responses to them, for a proxy that must never let two parsers
// disagree about where one request ends and the next begins.
//
// Guarantees of ReadRequest, each answered with an *Error carrying the
// status to send (400 unless noted):
//   - a request line is exactly METHOD SP TARGET SP HTTP/1.x CRLF, with a
//     token method and a target of visible ASCII; HTTP/2 and later are 505;
//   - every line ends in CRLF: a bare CR or LF, NUL or any other control
//     byte in the request line or a header is refused;
//   - header names are tokens with no space before the colon; folded
//     (obs-fold) lines are refused;
//   - the request line and header block together stay within the limit
//     given (414 for a request line alone over it, else 431);
//   - a body is framed one way only: Content-Length (one field, digits
//     only) or Transfer-Encoding exactly "chunked", never both and never
//     another coding (501); two Host fields are refused, and HTTP/1.1 needs
//     one except on CONNECT;
//   - an Expect other than 100-continue is 417.
//
// ReadBody reads a whole body into memory up to a limit (413 beyond it),
// so what is judged is exactly what is forwarded.
package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
)

// Error is a request the reader refuses, with the status to answer it.
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return e.Reason }

func errorf(status int, format string, a ...any) *Error {
	return &Error{Status: status, Reason: fmt.Sprintf(format, a...)}
}

// Request is a request head as read from the wire.
type Request struct {
	Method string
	Target string // the request-target exactly as sent
	Minor  int    // 0 or 1: HTTP/1.0 or HTTP/1.1
	Header http.Header
	// ContentLength is the declared body size; -1 when chunked.
	ContentLength int64
	// Close is true when the client will not send another request on the
	// connection (Connection: close, or HTTP/1.0 without keep-alive).
	Close bool
	// Expect100 is true when the client waits for 100 Continue before
	// sending the body.
	Expect100 bool

	// values backs the header's first few values, so a request's fields
	// do not cost an allocation each.
	values  [8]string
	nvalues int
}

const maxFields = 256

// ReadRequest reads one request head from br, at most limit bytes. It
// returns io.EOF when the connection ended cleanly before a request began.
// With an error it returns what it read of the request (method, target,
// header fields so far) once the request line was well-formed, else nil.
func ReadRequest(br *bufio.Reader, limit int) (*Request, error) {
	budget := limit
	var line []byte
	var err error
	// RFC 9112 2.2: a server should ignore an empty line or two before the
	// request line (a client's stray CRLF after a body).
	for range 3 {
		line, err = readLine(br, budget)
		if err != nil {
			if errors.Is(err, errTooLong) {
				return nil, errorf(http.StatusRequestURITooLong, "request line over %d bytes", limit)
			}
			return nil, err
		}
		budget -= len(line)
		if len(line) > 2 {
			break
		}
	}
	r := &Request{Header: make(http.Header, 8)}
	if err := r.parseRequestLine(line); err != nil {
		return nil, err
	}
	fields := 0
	for {
		line, err = readLine(br, budget)
		if err != nil {
			if errors.Is(err, errTooLong) {
				return r, errorf(http.StatusRequestHeaderFieldsTooLarge, "request header block over %d bytes", limit)
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return r, err
		}
		budget -= len(line)
		if len(line) == 2 {
			break
		}
		if fields++; fields > maxFields {
			return r, errorf(http.StatusRequestHeaderFieldsTooLarge, "more than %d header fields", maxFields)
		}
		if err := r.parseField(line[:len(line)-2]); err != nil {
			return r, err
		}
	}
	if err := r.frame(); err != nil {
		return r, err
	}
	return r, nil
}

var errTooLong = errors.New("line too long")

// readLine returns one line ending in CRLF, refusing a bare CR or LF, NUL
// and other control bytes except HTAB. A line that fits br's buffer is
// returned in place, valid until br's next read.
func readLine(br *bufio.Reader, budget int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > budget {
			return nil, errTooLong
		}
		if line == nil && err == nil {
			line = chunk
			break
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		break
	}
	n := len(line)
	if n < 2 || line[n-2] != '\r' {
		return nil, errorf(http.StatusBadRequest, "line not ended by CRLF (bare LF)")
	}
	for _, c := range line[:n-2] {
		if c < 0x20 && c != '\t' || c == 0x7f {
			switch c {
			case '\r':
				return nil, errorf(http.StatusBadRequest, "bare CR in request line or header")
			case 0:
				return nil, errorf(http.StatusBadRequest, "NUL in request line or header")
			}
			return nil, errorf(http.StatusBadRequest, "control byte %#02x in request line or header", c)
		}
	}
	return line, nil
}

func (r *Request) parseRequestLine(line []byte) error {
	line = line[:len(line)-2]
	method, rest, ok1 := bytes.Cut(line, []byte{' '})
	target, version, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 {
		return errorf(http.StatusBadRequest, "malformed request line")
	}
	if !isToken(method) || len(method) > 32 {
		return errorf(http.StatusBadRequest, "malformed method")
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return errorf(http.StatusBadRequest, "request target has a byte %#02x that is not visible ASCII", c)
		}
	}
	switch string(version) {
	case "HTTP/1.1":
		r.Minor = 1
	case "HTTP/1.0":
		r.Minor = 0
	default:
		if len(version) == 8 && bytes.HasPrefix(version, []byte("HTTP/")) && version[5] >= '2' && version[5] <= '9' && version[6] == '.' {
			return errorf(http.StatusHTTPVersionNotSupported, "%s is not supported; use HTTP/1.1", version)
		}
		return errorf(http.StatusBadRequest, "malformed HTTP version")
	}
	r.Method = internMethod(method)
	r.Target = string(target)
	return nil
}

// internMethod returns method as a string, without a copy for the
// common ones.
func internMethod(method []byte) string {
	for _, m := range methods {
		if string(method) == m {
			return m
		}
	}
	return string(method)
}

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
	http.MethodHead, http.MethodOptions, http.MethodConnect}

func (r *Request) parseField(line []byte) error {
	if line[0] == ' ' || line[0] == '\t' {
		return errorf(http.StatusBadRequest, "folded header line (obs-fold)")
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	if !ok || len(name) == 0 {
		return errorf(http.StatusBadRequest, "header line without a name and colon")
	}
	if !isToken(name) {
		return errorf(http.StatusBadRequest, "malformed header name %q", name)
	}
	value = bytes.Trim(value, " \t")
	key, ok := commonKeys[string(name)]
	if !ok {
		key = textproto.CanonicalMIMEHeaderKey(string(name))
	}
	v := string(value)
	if vs, ok := r.Header[key]; ok || r.nvalues == len(r.values) {
		r.Header[key] = append(vs, v)
		return nil
	}
	i := r.nvalues
	r.nvalues++
	r.values[i] = v
	// Capped at one: a second value for the key gets a slice of its own.
	r.Header[key] = r.values[i : i+1 : i+1]
	return nil
}

// commonKeys maps the header names most requests carry, canonical or
// lower-case, to their canonical form, without a copy of the name.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Anthropic-Version", "Authorization",
		"Cache-Control", "Connection", "Content-Encoding", "Content-Length", "Content-Type", "Cookie", "Expect", "Host",
		"If-Modified-Since", "If-None-Match", "Origin", "Pragma", "Proxy-Authorization", "Proxy-Connection",
		"Range", "Referer", "Te", "Transfer-Encoding", "Upgrade", "User-Agent", "X-Api-Key"} {
		m[k], m[strings.ToLower(k)] = k, k
	}
	return m
}()

// frame works out how the body is delimited and what the client expects.
func (r *Request) frame() error {
	h := r.Header
	if len(h["Host"]) > 1 {
		return errorf(http.StatusBadRequest, "more than one Host header")
	}
	if r.Minor == 1 && len(h["Host"]) == 0 && r.Method != http.MethodConnect {
		return errorf(http.StatusBadRequest, "HTTP/1.1 request without a Host header")
	}
	te, hasTE := h["Transfer-Encoding"]
	cl, hasCL := h["Content-Length"]
	switch {
	case hasTE && hasCL:
		return errorf(http.StatusBadRequest, "both Content-Length and Transfer-Encoding (request smuggling)")
	case hasTE:
		if r.Minor == 0 {
			return errorf(http.StatusBadRequest, "Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return errorf(http.StatusNotImplemented, "Transfer-Encoding %q is not supported; only chunked", strings.Join(te, ", "))
		}
		r.ContentLength = -1
	case hasCL:
		if len(cl) != 1 {
			return errorf(http.StatusBadRequest, "more than one Content-Length header")
		}
		n, err := parseLength(cl[0])
		if err != nil {
			return err
		}
		r.ContentLength = n
	}
	conn := tokens(h["Connection"])
	r.Close = conn["close"] || r.Minor == 0 && !conn["keep-alive"]
	if ex, ok := h["Expect"]; ok {
		if len(ex) != 1 || !strings.EqualFold(ex[0], "100-continue") {
			return errorf(http.StatusExpectationFailed, "unsupported Expect %q", strings.Join(ex, ", "))
		}
		r.Expect100 = r.Minor == 1
	}
	return nil
}

func parseLength(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, errorf(http.StatusBadRequest, "malformed Content-Length %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errorf(http.StatusBadRequest, "malformed Content-Length %q", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "malformed Content-Length %q", s)
	}
	return n, nil
}

// tokens returns the lower-cased comma-separated tokens of header values,
// as in Connection.
func tokens(values []string) map[string]bool {
	if len(values) == 0 {
		return nil
	}
	m := make(map[string]bool)
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
				m[t] = true
			}
		}
	}
	return m
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tokenByte[c] {
			return false
		}
	}
	return true
}

func isTokenString(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || !tokenByte[c] {
			return false
		}
	}
	return true
}

var tokenByte = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// ReadBody reads the body r declares from br, refusing one over limit
// bytes with a 413 before reading it when its length is declared. Trailer
// fields of a chunked body are read within the header limit and dropped.
func (r *Request) ReadBody(br *bufio.Reader, limit int64, headLimit int) ([]byte, error) {
	switch {
	case r.ContentLength == 0:
		return nil, nil
	case r.ContentLength > limit:
		return nil, errorf(http.StatusRequestEntityTooLarge, "body of %d bytes is over the %d byte limit", r.ContentLength, limit)
	case r.ContentLength > 0:
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, fmt.Errorf("body ended early: %w", err)
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(br), limit+1))
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err // the client is slow or gone, not malformed
		}
		return nil, errorf(http.StatusBadRequest, "malformed chunked body: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, errorf(http.StatusRequestEntityTooLarge, "chunked body is over the %d byte limit", limit)
	}
	for budget := headLimit; ; {
		line, err := readLine(br, budget)
		if err != nil {
			if errors.Is(err, errTooLong) {
				return nil, errorf(http.StatusRequestHeaderFieldsTooLarge, "trailer over %d bytes", headLimit)
			}
			return nil, err
		}
		if len(line) == 2 {
			return body, nil
		}
		budget -= len(line)
	}
}
