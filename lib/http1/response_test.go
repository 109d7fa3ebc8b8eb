package http1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStripHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":          {"close, X-Trace", "x-debug"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic b3JnOnNlY3JldA=="},
		"Proxy-Connection":    {"keep-alive"},
		"Proxy-Authenticate":  {"Basic"},
		"Te":                  {"trailers"},
		"Trailer":             {"X-Sum"},
		"Transfer-Encoding":   {"chunked"},
		"Upgrade":             {"websocket"},
		"X-Trace":             {"1"},
		"X-Debug":             {"1"},
		"Content-Type":        {"text/plain"},
		"Content-Length":      {"3"},
	}
	StripHopByHop(h)
	var got []string
	for k := range h {
		got = append(got, k)
	}
	if len(h) != 2 || h.Get("Content-Type") != "text/plain" || h.Get("Content-Length") != "3" {
		t.Errorf("left %v, want only Content-Type and Content-Length", got)
	}
}

func TestWriteSimple(t *testing.T) {
	for _, c := range []struct {
		name   string
		minor  int
		code   int
		header http.Header
		close  bool
		want   string
	}{
		{"1.1 keep-alive", 1, 403, http.Header{"X-Impgw-Decision": {"d-1"}}, false,
			"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\nX-Impgw-Decision: d-1\r\n\r\nnope\n"},
		{"1.1 close", 1, 502, nil, true,
			"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 5\r\n\r\nnope\n"},
		{"1.0 keep-alive", 0, 200, nil, false,
			"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nnope\n"},
		{"1.0 close", 0, 599, nil, true,
			"HTTP/1.0 599 status code 599\r\nConnection: close\r\nContent-Length: 5\r\n\r\nnope\n"},
	} {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := WriteSimple(w, c.minor, c.code, c.header, []byte("nope\n"), c.close); err != nil {
			t.Fatal(err)
		}
		if buf.String() != c.want {
			t.Errorf("%s:\n%q\nwant\n%q", c.name, buf.String(), c.want)
		}
	}
	// The caller's header is not changed.
	h := http.Header{"X-A": {"1"}}
	WriteSimple(bufio.NewWriter(io.Discard), 1, 200, h, []byte("x"), true)
	if len(h) != 1 {
		t.Errorf("WriteSimple changed the caller's header: %v", h)
	}
	// A writer that fails is reported.
	w := bufio.NewWriterSize(failingWriter{}, 16)
	if err := WriteSimple(w, 1, 200, nil, bytes.Repeat([]byte("x"), 64), false); err == nil {
		t.Error("a failed write was not reported")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestWriteResponseFraming(t *testing.T) {
	for _, c := range []struct {
		name      string
		method    string
		code      int
		length    int64
		minor     int
		want      string
		wantClose bool
	}{
		{"HEAD keeps the length, sends no body", "HEAD", 200, 4, 1, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", false},
		{"HEAD of unknown length", "HEAD", 200, -1, 1, "HTTP/1.1 200 OK\r\n\r\n", false},
		{"204 has no body", "GET", 204, 4, 1, "HTTP/1.1 204 No Content\r\n\r\n", false},
		{"304 has no body", "GET", 304, 4, 1, "HTTP/1.1 304 Not Modified\r\n\r\n", false},
		{"1xx has no body", "GET", 103, 4, 1, "HTTP/1.1 103 Early Hints\r\n\r\n", false},
		{"200 is the first with a body", "GET", 200, 4, 1, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", false},
		{"1.0 keep-alive with a length", "GET", 200, 4, 0, "HTTP/1.0 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\nbody", false},
		{"1.0 of unknown length closes", "GET", 200, -1, 0, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nbody", true},
		{"1.1 of unknown length is chunked", "GET", 200, -1, 1, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n", false},
		{"empty body of length 0", "GET", 200, 0, 1, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
	} {
		body := "body"
		if c.length == 0 {
			body = ""
		}
		resp := &http.Response{StatusCode: c.code, Header: http.Header{}, ContentLength: c.length, Body: io.NopCloser(strings.NewReader(body))}
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		_, closed, err := WriteResponse(w, resp, c.method, c.minor, false)
		if err != nil || buf.String() != c.want || closed != c.wantClose {
			t.Errorf("%s:\n%q close %v %v\nwant\n%q close %v", c.name, buf.String(), closed, err, c.want, c.wantClose)
		}
	}
	// A body shorter than declared breaks the framing: close.
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 10, Body: io.NopCloser(strings.NewReader("short"))}
	n, closed, err := WriteResponse(bufio.NewWriter(io.Discard), resp, "GET", 1, false)
	if err == nil || !closed || n != 5 || !strings.Contains(err.Error(), "response body of 5 bytes, 10 declared") {
		t.Errorf("short body: %d %v %v", n, closed, err)
	}
}

func TestReadBodyLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		length int64
		wire   string
		limit  int64
		want   string
		status int // 0: a plain error, not an *Error
	}{
		{"none", 0, "ignored", 4, "", -1},
		{"at the limit", 4, "abcd", 4, "abcd", -1},
		{"over the limit", 5, "abcde", 4, "", 413},
		{"ends early", 4, "ab", 4, "", 0},
		{"chunked at the limit", -1, "4\r\nabcd\r\n0\r\n\r\n", 4, "abcd", -1},
		{"chunked over the limit", -1, "5\r\nabcde\r\n0\r\n\r\n", 4, "", 413},
		{"chunked with a trailer", -1, "2\r\nab\r\n0\r\nX-Sum: 1\r\n\r\n", 4, "ab", -1},
		{"chunked malformed", -1, "zz\r\nab\r\n", 4, "", 400},
		{"chunked cut short", -1, "4\r\nab", 4, "", 0},
	} {
		r := &Request{Method: "POST", Minor: 1, Header: http.Header{}, ContentLength: c.length}
		body, err := r.ReadBody(bufio.NewReader(strings.NewReader(c.wire)), c.limit, 64)
		var he *Error
		switch {
		case c.status < 0 && (err != nil || string(body) != c.want):
			t.Errorf("%s: %q %v, want %q", c.name, body, err, c.want)
		case c.status > 0 && (!errors.As(err, &he) || he.Status != c.status):
			t.Errorf("%s: %q %v, want status %d", c.name, body, err, c.status)
		case c.status == 0 && (err == nil || errors.As(err, &he)):
			t.Errorf("%s: %q %v, want a connection error", c.name, body, err)
		}
	}
	// A trailer longer than the header limit is refused.
	r := &Request{Method: "POST", Minor: 1, Header: http.Header{}, ContentLength: -1}
	_, err := r.ReadBody(bufio.NewReader(strings.NewReader("1\r\na\r\n0\r\nX-Long: "+strings.Repeat("l", 100)+"\r\n\r\n")), 4, 32)
	var he *Error
	if !errors.As(err, &he) || he.Status != http.StatusRequestHeaderFieldsTooLarge || he.Error() != "trailer over 32 bytes" {
		t.Errorf("long trailer: %v", err)
	}
}

// A HEAD response keeps a declared length of zero: zero is a length, only
// -1 is unknown.
func TestWriteResponseHeadOfLengthZero(t *testing.T) {
	var buf bytes.Buffer
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 0, Body: io.NopCloser(strings.NewReader(""))}
	if _, _, err := WriteResponse(bufio.NewWriter(&buf), resp, "HEAD", 1, false); err != nil {
		t.Fatal(err)
	}
	if want := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

// Only fields with a token name and a value free of control bytes (HTAB
// aside) reach the client; the edges of both checks are exercised one
// field at a time.
func TestWriteResponseFieldEdges(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        string // the field line written, "" when dropped
	}{
		{"X-Ok9z", "v", "X-Ok9z: v\r\n"},
		{"X~", "v", "X~: v\r\n"},
		{"Bad Name", "v", ""},
		{"X:", "v", ""},
		{"X\x7f", "v", ""},
		{"X\x80", "v", ""},
		{"X\xff", "v", ""},
		{"", "v", ""},
		{"X", "a b", "X: a b\r\n"},
		{"X", "  a\tb ", "X: a\tb\r\n"},
		{"X", "a!~", "X: a!~\r\n"},
		{"X", "a\x1fb", ""},
		{"X", "\x01a", ""},
		{"X", "a\x7f", ""},
		{"X", "a\rb", ""},
		{"X", "a\nb", ""},
	} {
		var buf bytes.Buffer
		resp := &http.Response{StatusCode: 204, Header: http.Header{c.name: {c.value}}}
		if _, _, err := WriteResponse(bufio.NewWriter(&buf), resp, "GET", 1, false); err != nil {
			t.Fatal(err)
		}
		if want := "HTTP/1.1 204 No Content\r\n" + c.want + "\r\n"; buf.String() != want {
			t.Errorf("field %q: %q\ngot  %q\nwant %q", c.name, c.value, buf.String(), want)
		}
	}
}

// RetryAfter rounds up to whole seconds and never says less than one.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	for at, want := range map[time.Time]string{
		now.Add(60 * time.Second):                  "60",
		now.Add(59*time.Second + time.Millisecond): "60",
		now.Add(time.Millisecond):                  "1",
		now:                                        "1",
		now.Add(-time.Hour):                        "1",
	} {
		if got := RetryAfter(at, now); got != want {
			t.Errorf("RetryAfter(%s) = %s, want %s", at.Sub(now), got, want)
		}
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		w := f.n
		f.n = 0
		return w, errors.New("connection reset")
	}
	f.n -= len(p)
	return len(p), nil
}

// A body of unknown length that cannot be written to the client, in a
// chunk or at a flush, is an error that closes the connection, with the
// bytes taken from the body so far.
func TestWriteResponseStreamFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		minor int
		buf   int   // the bufio.Writer's size: small, a chunk's write fails
		n     int64 // the body's bytes counted before the failure
	}{
		{"chunked, the chunk's write", 1, 16, 0},
		{"chunked, the flush", 1, 4096, 100},
		{"close-delimited, the flush", 0, 4096, 100},
	} {
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: -1, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", 100)))}
		w := bufio.NewWriterSize(&failAfter{n: 10}, tc.buf)
		n, closeConn, err := WriteResponse(w, resp, "GET", tc.minor, false)
		if err == nil || !strings.Contains(err.Error(), "connection reset") || !closeConn || n != tc.n {
			t.Errorf("%s: %d bytes, close %v, %v", tc.name, n, closeConn, err)
		}
	}
}

// reads hands out its parts one Read each.
type reads struct{ parts []string }

func (r *reads) Read(p []byte) (int, error) {
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	if r.parts[0] = r.parts[0][n:]; r.parts[0] == "" {
		r.parts = r.parts[1:]
	}
	return n, nil
}

// writes keeps each Write it is given.
type writes struct{ got [][]byte }

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, bytes.Clone(p))
	return len(p), nil
}

// A body of unknown length is relayed one chunk per read, each chunk's
// size line, data and CRLF in one write to the connection (the first
// with the head), and no chunk over what two TLS records hold.
func TestWriteResponseChunkPerWrite(t *testing.T) {
	parts := []string{"data: first\n\n", strings.Repeat("a", 20000), strings.Repeat("b", 9), strings.Repeat("c", 40000)}
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: -1, Body: io.NopCloser(&reads{parts: slices.Clone(parts)})}
	conn := &writes{}
	n, closeConn, err := WriteResponse(bufio.NewWriterSize(conn, 8<<10), resp, "GET", 1, false)
	if err != nil || closeConn || n != int64(len(strings.Join(parts, ""))) {
		t.Fatalf("%d bytes, close %v, %v", n, closeConn, err)
	}
	// The last part is read in two, the chunk's data at most chunkFrame
	// less the size line and CRLF.
	want := []string{parts[0], parts[1], parts[2], parts[3][:chunkFrame-chunkHead-2], parts[3][chunkFrame-chunkHead-2:], ""}
	if len(conn.got) != len(want) {
		t.Fatalf("%d writes, want one a chunk and one for the last: %q", len(conn.got), conn.got)
	}
	head, first, _ := bytes.Cut(conn.got[0], []byte("\r\n\r\n"))
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 OK\r\n")) {
		t.Fatalf("first write %q is not the head", conn.got[0])
	}
	conn.got[0] = first
	for i, w := range conn.got {
		if len(w) > chunkFrame {
			t.Errorf("write %d of %d bytes, over %d", i, len(w), chunkFrame)
		}
		body, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(append(w, "0\r\n\r\n"...))))
		if i == len(want)-1 {
			body, err = io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(w)))
		}
		if err != nil || string(body) != want[i] {
			t.Errorf("write %d: %.40q, %v; want the chunk %.40q", i, body, err, want[i])
		}
	}
}
