package dial

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestWriteRequestMatchesNetHTTP holds the hand-written request writer
// to http.Request.Write's bytes for every shape of request the gateway
// forwards.
func TestWriteRequestMatchesNetHTTP(t *testing.T) {
	body := func(s string) *http.Request {
		return &http.Request{ContentLength: int64(len(s)), Body: io.NopCloser(strings.NewReader(s))}
	}
	cases := []struct {
		name string
		req  *http.Request
	}{
		{"get", &http.Request{}},
		{"query", &http.Request{URL: &url.URL{Scheme: "https", Host: "api.test", Opaque: "/a/b", RawQuery: "x=1&y=%20"}}},
		{"post body", body(`{"a":1}`)},
		{"post empty", &http.Request{Method: "POST"}},
		{"delete empty", &http.Request{Method: "DELETE"}},
		{"head", &http.Request{Method: "HEAD"}},
		{"put body", func() *http.Request { r := body("xyz"); r.Method = "PUT"; return r }()},
		{"no user agent", &http.Request{Header: http.Header{"User-Agent": {""}}}},
		{"user agent kept, first only", &http.Request{Header: http.Header{"User-Agent": {" curl/8 ", "second"}}}},
		{"user agent key, no values", &http.Request{Header: http.Header{"User-Agent": {}}}},
		{"repeated fields in order", &http.Request{Header: http.Header{"Accept": {"a", "b"}, "X-Z": {"1"}, "Cookie": {"c=1"}}}},
		{"newlines become spaces", &http.Request{Header: http.Header{"X-Secret": {"ab\r\ncd\n", "\te f "}}}},
		{"framing fields from the request only", &http.Request{Method: "POST", Header: http.Header{
			"Host": {"evil.test"}, "Content-Length": {"99"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}}}},
		{"upgrade", &http.Request{Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}}},
		{"field names that are not tokens are dropped", &http.Request{Header: http.Header{
			"X-Ok": {"1"}, "Bad Name": {"2"}, "X:Y": {"3"}, "X-A\r\nInjected": {"4"}, "": {"5"}, "X-\u00e9": {"6"}, "X-Nul\x00": {"7"}}}},
		{"close", &http.Request{Close: true}},
		{"close already said", &http.Request{Close: true, Header: http.Header{"Connection": {"keep-alive, Close"}}}},
		{"port and ipv6", &http.Request{Host: "[2001:db8::1]:8443", URL: &url.URL{Scheme: "https", Host: "[2001:db8::1]:8443", Opaque: "/"}}},
		{"many fields", func() *http.Request {
			h := http.Header{}
			for _, k := range strings.Fields("A B C D E F G H I J K L M N O P Q R S T U V W X Y Z Aa Bb Cc Dd Ee Ff Gg Hh") {
				h["X-"+k] = []string{k}
			}
			return &http.Request{Header: h}
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.req
			if r.Method == "" {
				r.Method = "GET"
			}
			if r.URL == nil {
				r.URL = &url.URL{Scheme: "https", Host: "api.test", Opaque: "/v1/items"}
			}
			if r.Host == "" {
				r.Host = r.URL.Host
			}
			if r.Header == nil {
				r.Header = http.Header{}
			}
			r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
			var raw []byte
			if r.Body != nil {
				raw, _ = io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(raw))
			}
			var want bytes.Buffer
			if err := r.Write(&want); err != nil {
				t.Fatal(err)
			}
			if r.Body != nil {
				r.Body = io.NopCloser(bytes.NewReader(raw))
			}
			var got bytes.Buffer
			w := bufio.NewWriter(&got)
			if err := writeRequest(w, r); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if got.String() != want.String() {
				t.Errorf("wrote\n%q\nnet/http writes\n%q", got.String(), want.String())
			}
		})
	}
}

// TestWriteRequestRefuses checks what the writer will not send: a Host
// that could end the line or name another host, a body of unknown
// length, one shorter than declared.
func TestWriteRequestRefuses(t *testing.T) {
	u := &url.URL{Scheme: "https", Host: "api.test", Opaque: "/"}
	for name, r := range map[string]*http.Request{
		"host with a space":  {Method: "GET", URL: u, Host: "api.test evil"},
		"host with CRLF":     {Method: "GET", URL: u, Host: "api.test\r\nX-Evil: 1"},
		"host with a zone":   {Method: "GET", URL: u, Host: "[fe80::1%25eth0]"},
		"host with a slash":  {Method: "GET", URL: u, Host: "api.test/x"},
		"no host":            {Method: "GET", URL: &url.URL{Opaque: "/"}},
		"CRLF in the path":   {Method: "GET", URL: &url.URL{Opaque: "/a\r\nX-Evil: 1"}, Host: "api.test"},
		"space in the query": {Method: "GET", URL: &url.URL{Opaque: "/a", RawQuery: "q=a b"}, Host: "api.test"},
		"chunked body":       {Method: "POST", URL: u, Host: "api.test", ContentLength: -1, Body: io.NopCloser(strings.NewReader("x"))},
		"body missing":       {Method: "POST", URL: u, Host: "api.test", ContentLength: 3},
		"body short":         {Method: "POST", URL: u, Host: "api.test", ContentLength: 3, Body: io.NopCloser(strings.NewReader("x"))},
	} {
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := writeRequest(w, r); err == nil {
			w.Flush()
			t.Errorf("%s: wrote %q, want an error", name, out.String())
		}
	}
}

func TestSamePort(t *testing.T) {
	for _, c := range []struct {
		p    string
		port uint16
		ok   bool
	}{{"443", 443, true}, {"8443", 443, false}, {"0443", 443, false}, {"", 443, false}, {"0", 0, true},
		{"65535", 65535, true}, {"65536", 0, false}, {"+443", 443, false}, {"4_43", 443, false}, {"44", 443, false}} {
		if got := samePort(c.p, c.port); got != c.ok {
			t.Errorf("samePort(%q, %d) = %v, want %v", c.p, c.port, got, c.ok)
		}
	}
}
