package http1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

func read(raw string, limit int) (*Request, []byte, error) {
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	r, err := ReadRequest(br, limit)
	if err != nil {
		return nil, nil, err
	}
	body, err := r.ReadBody(br, 64, limit)
	return r, body, err
}

func TestReadRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"bare LF line ends", "GET / HTTP/1.1\nHost: a\n\n", 400},
		{"bare LF in header", "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", 400},
		{"bare CR in header", "GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", 400},
		{"NUL in header value", "GET / HTTP/1.1\r\nHost: a\r\nX: b\x00c\r\n\r\n", 400},
		{"NUL in target", "GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"space in target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"no version", "GET /\r\nHost: a\r\n\r\n", 400},
		{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"bad method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"non-ASCII target", "GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n", 400},
		{"no colon", "GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n", 400},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"CL and TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"two CL", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400},
		{"CL list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", 400},
		{"signed CL", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", 400},
		{"TE gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"TE twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
		{"TE in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"expect other", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417},
		{"long request line", "GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\nHost: a\r\n\r\n", 414},
		{"long header block", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 300) + "\r\n\r\n", 431},
		{"body over cap", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 65\r\n\r\n", 413},
		{"chunked over cap", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n" + strings.Repeat("a", 65) + "\r\n0\r\n\r\n", 413},
		{"bad chunk size", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := read(tc.raw, 256)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want status %d", err, tc.status)
			}
			if e.Status != tc.status {
				t.Fatalf("got %d (%s), want %d", e.Status, e.Reason, tc.status)
			}
		})
	}
}

func TestReadRequestAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		body      string
		close     bool
	}{
		{"simple", "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "", false},
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "", false},
		{"length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", "abc", false},
		{"chunked with trailer", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n1;ext=1\r\nd\r\n0\r\nX-T: 1\r\n\r\n", "abcd", false},
		{"close", "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Close\r\n\r\n", "", true},
		{"1.0", "GET / HTTP/1.0\r\n\r\n", "", true},
		{"1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "", false},
		{"CONNECT without Host", "CONNECT a:443 HTTP/1.1\r\n\r\n", "", false},
		{"tab in value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\tb \r\n\r\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, body, err := read(tc.raw, 256)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tc.body || r.Close != tc.close {
				t.Fatalf("body %q close %v, want %q %v", body, r.Close, tc.body, tc.close)
			}
		})
	}
}

func TestKeepAliveSequence(t *testing.T) {
	raw := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhiGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(raw))
	r, err := ReadRequest(br, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := r.ReadBody(br, 10, 1024); err != nil || string(b) != "hi" {
		t.Fatalf("body %q %v", b, err)
	}
	r, err = ReadRequest(br, 1024)
	if err != nil || r.Target != "/2" {
		t.Fatalf("second request %+v %v", r, err)
	}
	if _, err := ReadRequest(br, 1024); err != io.EOF {
		t.Fatalf("after the last request: %v, want io.EOF", err)
	}
}

func TestWriteResponse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resp   *http.Response
		method string
		minor  int
		want   string
		close  bool
	}{
		{"length", &http.Response{StatusCode: 200, ContentLength: 2, Header: http.Header{"X": {"1"}, "Connection": {"x-hop"}, "X-Hop": {"2"}}, Body: io.NopCloser(strings.NewReader("ok"))}, "GET", 1,
			"HTTP/1.1 200 OK\r\nX: 1\r\nContent-Length: 2\r\n\r\nok", false},
		{"chunked", &http.Response{StatusCode: 200, ContentLength: -1, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok"))}, "GET", 1,
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
		{"1.0 unknown length", &http.Response{StatusCode: 200, ContentLength: -1, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok"))}, "GET", 0,
			"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nok", true},
		{"head", &http.Response{StatusCode: 200, ContentLength: 5, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, "HEAD", 1,
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false},
		{"control byte dropped", &http.Response{StatusCode: 204, Header: http.Header{"X": {"a\x00b"}, "Y": {"ok"}}}, "GET", 1,
			"HTTP/1.1 204 No Content\r\nY: ok\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			_, closed, err := WriteResponse(w, tc.resp, tc.method, tc.minor, false)
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want || closed != tc.close {
				t.Fatalf("got %q close %v\nwant %q close %v", buf.String(), closed, tc.want, tc.close)
			}
		})
	}
}

func FuzzReadRequest(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	f.Add("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	f.Add("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		r, _, err := read(raw, 512)
		if err != nil {
			return
		}
		// Whatever was accepted is free of the bytes that split requests.
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.ContainsAny(k+v+r.Target+r.Method, "\r\n\x00") {
					t.Fatalf("accepted a CR, LF or NUL: %q: %q", k, v)
				}
			}
		}
		if _, ok := r.Header["Transfer-Encoding"]; ok && r.Header.Get("Content-Length") != "" {
			t.Fatal("accepted both Content-Length and Transfer-Encoding")
		}
	})
}

// refusal asserts err is an *Error with status and reason.
func refusal(t *testing.T, what string, err error, status int, reason string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s: got %v, want %d %q", what, err, status, reason)
		return
	}
	if e.Status != status || e.Reason != reason {
		t.Errorf("%s: got %d %q, want %d %q", what, e.Status, e.Reason, status, reason)
	}
}

// The limit covers the request line and header block together, final CRLF
// included: a head of exactly limit bytes is read, one byte more is not,
// whether a line arrives in one buffer or in several.
func TestHeadLimitEdge(t *testing.T) {
	line := "GET /abcdefgh HTTP/1.1\r\n"
	head := line + "Host: a\r\nX-Pad: " + strings.Repeat("p", 40) + "\r\n\r\n"
	for _, size := range []int{16, 4096} {
		at := func(raw string, limit int) (*Request, error) {
			return ReadRequest(bufio.NewReaderSize(strings.NewReader(raw), size), limit)
		}
		r, err := at(head, len(head))
		if err != nil || r.Target != "/abcdefgh" || r.Header.Get("X-Pad") != strings.Repeat("p", 40) {
			t.Errorf("buffer %d: head of exactly the limit: %+v %v", size, r, err)
		}
		_, err = at(head, len(head)-1)
		refusal(t, "head one byte over", err, 431, fmt.Sprintf("request header block over %d bytes", len(head)-1))
		// A request line of exactly the limit is read; the header block
		// then has no room left.
		_, err = at(head, len(line))
		refusal(t, "request line of exactly the limit", err, 431, fmt.Sprintf("request header block over %d bytes", len(line)))
		_, err = at(head, len(line)-1)
		refusal(t, "request line one byte over", err, 414, fmt.Sprintf("request line over %d bytes", len(line)-1))
	}
}

// At most maxFields header fields: the last one allowed is read, the next
// is refused.
func TestFieldCountEdge(t *testing.T) {
	head := func(n int) string {
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: a\r\n")
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, "X-%d: v\r\n", i)
		}
		b.WriteString("\r\n")
		return b.String()
	}
	r, err := ReadRequest(bufio.NewReader(strings.NewReader(head(maxFields))), 1<<16)
	if err != nil || len(r.Header) != maxFields || r.Header.Get(fmt.Sprintf("X-%d", maxFields-1)) != "v" {
		t.Fatalf("%d fields: %d read, %v", maxFields, len(r.Header), err)
	}
	_, err = ReadRequest(bufio.NewReader(strings.NewReader(head(maxFields+1))), 1<<16)
	refusal(t, "one field too many", err, 431, "more than 256 header fields")
}

// A connection that ends inside a request line is cut short, not a clean
// end between requests.
func TestRequestLineCutShort(t *testing.T) {
	for raw, want := range map[string]error{
		"":                              io.EOF,
		"\r\n":                          io.EOF,
		"GET / HTTP/1.1":                io.ErrUnexpectedEOF,
		"\r\nGET / HTTP/1":              io.ErrUnexpectedEOF,
		"GET / HTTP/1.1\r\nHost: a\r\n": io.ErrUnexpectedEOF,
	} {
		if _, err := ReadRequest(bufio.NewReader(strings.NewReader(raw)), 256); err != want {
			t.Errorf("%q: got %v, want %v", raw, err, want)
		}
	}
}

func TestMethodLengthEdge(t *testing.T) {
	m := strings.Repeat("M", 32)
	r, err := ReadRequest(bufio.NewReader(strings.NewReader(m+" / HTTP/1.1\r\nHost: a\r\n\r\n")), 256)
	if err != nil || r.Method != m {
		t.Fatalf("32-byte method: %+v %v", r, err)
	}
	_, err = ReadRequest(bufio.NewReader(strings.NewReader(m+"M / HTTP/1.1\r\nHost: a\r\n\r\n")), 256)
	refusal(t, "33-byte method", err, 400, "malformed method")
}

// The target check is the request line's own: it holds for a line that
// did not come through readLine's control-byte check.
func TestTargetBytes(t *testing.T) {
	for _, c := range []struct {
		target string
		reason string
	}{
		{"/~!", ""},
		{"/a\x7f", "request target has a byte 0x7f that is not visible ASCII"},
		{"/a\x80", "request target has a byte 0x80 that is not visible ASCII"},
		{"/a\x1f", "request target has a byte 0x1f that is not visible ASCII"},
		{"/a\tb", "request target has a byte 0x09 that is not visible ASCII"},
	} {
		r := &Request{Header: http.Header{}}
		err := r.parseRequestLine([]byte("GET " + c.target + " HTTP/1.1\r\n"))
		if c.reason == "" {
			if err != nil || r.Target != c.target {
				t.Errorf("%q: %v", c.target, err)
			}
			continue
		}
		refusal(t, fmt.Sprintf("target %q", c.target), err, 400, c.reason)
	}
}

func TestVersionEdges(t *testing.T) {
	for _, c := range []struct {
		version string
		status  int
		reason  string
	}{
		{"HTTP/2.0", 505, "HTTP/2.0 is not supported; use HTTP/1.1"},
		{"HTTP/9.9", 505, "HTTP/9.9 is not supported; use HTTP/1.1"},
		{"HTTP/1.2", 400, "malformed HTTP version"},
		{"HTTP/:.0", 400, "malformed HTTP version"},
		{"HTTP/9.", 400, "malformed HTTP version"},
		{"HTTP/9x0", 400, "malformed HTTP version"},
	} {
		_, err := ReadRequest(bufio.NewReader(strings.NewReader("GET / "+c.version+"\r\nHost: a\r\n\r\n")), 256)
		refusal(t, c.version, err, c.status, c.reason)
	}
}

func TestExpect(t *testing.T) {
	for _, c := range []struct {
		raw       string
		expect100 bool
	}{
		{"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n", true},
		// An HTTP/1.0 client does not wait for a 100 it cannot be sent.
		{"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n", false},
	} {
		r, err := ReadRequest(bufio.NewReader(strings.NewReader(c.raw)), 256)
		if err != nil || r.Expect100 != c.expect100 {
			t.Errorf("%q: %+v %v, want Expect100 %v", c.raw, r, err, c.expect100)
		}
	}
	_, err := ReadRequest(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nExpect: 100-continue\r\n\r\n")), 256)
	refusal(t, "two Expect fields", err, 417, `unsupported Expect "100-continue, 100-continue"`)
}

// Content-Length is 1 to 18 ASCII digits: the edge digits and the longest
// length are read, the bytes next to the digits and a 19th digit are not.
func TestContentLengthEdges(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int64
	}{
		{"0", 0},
		{"9", 9},
		{"10", 10},
		{"0009", 9},
		{"999999999999999999", 999999999999999999},
		{"", -2},
		{"1/", -2},
		{"/", -2},
		{"1:", -2},
		{":", -2},
		{"1000000000000000000", -2},
	} {
		raw := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + c.value + "\r\n\r\n"
		r, err := ReadRequest(bufio.NewReader(strings.NewReader(raw)), 256)
		if c.want == -2 {
			refusal(t, "Content-Length "+c.value, err, 400, fmt.Sprintf("malformed Content-Length %q", c.value))
			continue
		}
		if err != nil || r.ContentLength != c.want {
			t.Errorf("Content-Length %q: %+v %v, want %d", c.value, r, err, c.want)
		}
	}
}

// Header names and methods are tokens: every tchar, the edges of each
// range included, is read; the bytes just outside the ranges are not.
func TestTokenEdges(t *testing.T) {
	name := "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&'*+-.^_`|~"
	r, err := ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: a\r\n"+name+": v\r\n\r\n")), 512)
	if err != nil || len(r.Header) != 2 {
		t.Fatalf("every tchar in a name: %+v %v", r, err)
	}
	for _, m := range []string{"Z09", "z9", "0", "a~|"} {
		r, err := ReadRequest(bufio.NewReader(strings.NewReader(m+" / HTTP/1.1\r\nHost: a\r\n\r\n")), 256)
		if err != nil || r.Method != m {
			t.Errorf("method %q: %+v %v", m, r, err)
		}
	}
	for _, n := range []string{"X/", "X@", "X[", "X{", "X\"", "X\x7f", "X\x80", "X\xff", "X\x7e\x80"} {
		_, err := ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: a\r\n"+n+": v\r\n\r\n")), 256)
		reason := fmt.Sprintf("malformed header name %q", n)
		if n == "X\x7f" {
			reason = "control byte 0x7f in request line or header"
		}
		refusal(t, fmt.Sprintf("name %q", n), err, 400, reason)
	}
}

// TestHeaderAsNetHTTPReadsIt holds the header ReadRequest builds (names
// from a table or canonicalised, values backed by the request) to the
// one net/http reads from the same head: more distinct fields than the
// request backs, a name repeated before and after, lower-case and
// odd-case names, a second value for a backed field.
func TestHeaderAsNetHTTPReadsIt(t *testing.T) {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nhost: a\r\nAccept: x\r\naccept: y\r\nUSER-AGENT: u\r\nx-one: 1\r\n")
	for i := range 12 {
		fmt.Fprintf(&b, "X-F%d: v%d\r\n", i, i)
	}
	b.WriteString("Accept: z\r\nx-ONE: 2\r\nCookie: c=1\r\nX-F11: again\r\n\r\n")
	raw := b.String()
	r, err := ReadRequest(bufio.NewReader(strings.NewReader(raw)), 4096)
	if err != nil {
		t.Fatal(err)
	}
	want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want.Header["Host"] = []string{want.Host} // net/http moves Host out of the header
	if !reflect.DeepEqual(r.Header, want.Header) {
		t.Fatalf("header\n%v\nnet/http reads\n%v", r.Header, want.Header)
	}
	// Each key's values are its own: appending to one leaves the next alone.
	r.Header["Host"] = append(r.Header["Host"], "h")
	r.Header["X-F0"] = append(r.Header["X-F0"], "w")
	if got := r.Header["X-F1"]; len(got) != 1 || got[0] != "v1" {
		t.Fatalf("appending to X-F0 changed X-F1: %q", got)
	}
	if got := r.Header["User-Agent"]; len(got) != 1 || got[0] != "u" {
		t.Fatalf("appending to Host changed User-Agent: %q", got)
	}
	for k, v := range commonKeys {
		if textproto.CanonicalMIMEHeaderKey(k) != v {
			t.Errorf("common key %q maps to %q, not its canonical form", k, v)
		}
	}
}

// TestReadRequestAllocations bounds what reading a usual head costs: the
// Request, its header map, the target and one string per value, no copy
// of a line, a common name or method, and no slice per field.
func TestReadRequestAllocations(t *testing.T) {
	const raw = "GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
	sr := strings.NewReader(raw)
	br := bufio.NewReader(sr)
	n := testing.AllocsPerRun(100, func() {
		sr.Reset(raw)
		br.Reset(sr)
		if r, err := ReadRequest(br, 4096); err != nil || len(r.Header) != 3 {
			t.Fatal(r, err)
		}
	})
	t.Logf("%.0f allocations", n)
	if n > 7 {
		t.Errorf("%.0f allocations to read a three-field GET, want at most 7", n)
	}
}
