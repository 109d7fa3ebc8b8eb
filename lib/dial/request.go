package dial

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req's head and body to w as http.Request.Write
// would for the requests a proxy forwards (origin-form target, a body
// held in memory or none), byte for byte, without its allocations: the
// transfer writer, the URL's rendering, a sorted copy of the header.
// Field names that are tokens are written as given (others are dropped),
// values with CR and LF turned into spaces and trimmed, in the order of
// the names; Host, User-Agent (the first value, none if empty),
// Content-Length, Transfer-Encoding and Trailer come from req, never from
// its header. A target holding a space or a control byte is refused
// (net/http refuses only the control byte): either would end the request
// line early.
func writeRequest(w *bufio.Writer, req *http.Request) error {
	if req.ContentLength < 0 || req.ContentLength > 0 && req.Body == nil {
		return fmt.Errorf("dial: request body of unknown or missing length (Content-Length %d)", req.ContentLength)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validHost(host) {
		return errors.New("dial: invalid Host header")
	}
	uri := requestURI(req)
	if strings.IndexFunc(uri, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return errors.New("dial: control byte or space in the request target")
	}
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	if ua, ok := req.Header["User-Agent"]; ok && len(ua) > 0 && ua[0] != "" {
		writeField(w, "User-Agent", ua[0])
	} else if !ok {
		writeField(w, "User-Agent", "Go-http-client/1.1")
	}
	if req.Close && !hasToken(req.Header["Connection"], "close") {
		w.WriteString("Connection: close\r\n")
	}
	if sendLength(req) {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(req.ContentLength, 10))
		w.WriteString("\r\n")
	}
	var stack [32]string
	keys := stack[:0]
	for k := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		// As net/http drops them: a name that is not a token could
		// end its line and start a field the request never judged had.
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range req.Header[k] {
			writeField(w, k, v)
		}
	}
	if _, err := w.WriteString("\r\n"); err != nil {
		return err
	}
	if req.ContentLength > 0 {
		n, err := w.ReadFrom(req.Body)
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return fmt.Errorf("dial: request body of %d bytes, %d declared", n, req.ContentLength)
		}
	}
	return nil
}

// requestURI is req.URL.RequestURI for an origin-form target, without
// the string concatenation when there is no query.
func requestURI(req *http.Request) string {
	u := req.URL
	if u.Opaque == "" || strings.HasPrefix(u.Opaque, "//") || u.ForceQuery || u.RawQuery != "" {
		return u.RequestURI()
	}
	return u.Opaque
}

// sendLength is http's rule for a Content-Length field: with a body, and
// for an empty one on POST, PUT and PATCH (servers expect one there).
func sendLength(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return true
	}
	return req.ContentLength > 0
}

// writeField writes one field, its value on one line as http.Header.Write
// does: CR and LF become spaces, surrounding white space goes.
func writeField(w *bufio.Writer, k, v string) {
	w.WriteString(k)
	w.WriteString(": ")
	v = strings.Trim(v, " \t\r\n")
	for {
		i := strings.IndexAny(v, "\r\n")
		if i < 0 {
			break
		}
		w.WriteString(v[:i])
		w.WriteByte(' ')
		v = v[i+1:]
	}
	w.WriteString(v)
	w.WriteString("\r\n")
}

// validHost is net/http's check of a Host value (non-empty, and only
// bytes a host name, port or bracketed IPv6 address may hold, so nothing
// ends the line early), refusing as well the IPv6 zone net/http would cut
// off: the name judged is the name sent.
func validHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(hostPunct, c) >= 0) {
			return false
		}
	}
	return true
}

// hostPunct is what a Host value may hold besides letters and digits.
const hostPunct = "!$&()*+,-.:;=[]'_~"

// hasToken reports whether a comma-separated field names token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
