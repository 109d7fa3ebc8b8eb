package http1

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hopByHopFields describe one connection, not the message; a proxy never
// forwards them (RFC 9110 7.6.1). Fields named by Connection are
// hop-by-hop as well.
var hopByHopFields = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// StripHopByHop deletes the hop-by-hop fields from h, including those the
// Connection field names.
func StripHopByHop(h http.Header) {
	for t := range tokens(h["Connection"]) {
		h.Del(t)
	}
	for _, k := range hopByHopFields {
		delete(h, k)
	}
}

// WriteResponse writes resp to w for a request made with method by an
// HTTP/1.minor client, then flushes. The body is framed by Content-Length
// when its length is known, else chunked for HTTP/1.1 clients, else by
// closing; close adds Connection: close. A body of unknown length is
// flushed as each part arrives. It returns the body bytes written
// and whether the connection must close afterwards. Header values with
// control bytes are dropped, never written.
func WriteResponse(w *bufio.Writer, resp *http.Response, method string, minor int, close bool) (int64, bool, error) {
	code := resp.StatusCode
	noBody := method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	chunked := false
	writeStatusLine(w, minor, code)
	writeEndToEnd(w, resp.Header)
	if !noBody {
		switch {
		case resp.ContentLength >= 0:
			writeField(w, "Content-Length", strconv.FormatInt(resp.ContentLength, 10))
		case minor == 1:
			chunked = true
			writeField(w, "Transfer-Encoding", "chunked")
		default:
			close = true
		}
	} else if method == http.MethodHead && resp.ContentLength >= 0 {
		writeField(w, "Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if close {
		writeField(w, "Connection", "close")
	} else if minor == 0 {
		writeField(w, "Connection", "keep-alive")
	}
	w.WriteString("\r\n")
	if noBody || resp.Body == nil {
		return 0, close, w.Flush()
	}
	var n int64
	var err error
	switch {
	case chunked:
		n, err = copyChunked(w, resp.Body)
		if err == nil {
			_, err = w.WriteString("0\r\n\r\n")
		}
	case resp.ContentLength >= 0:
		// Read to the end, not just the length: the end is what tells a
		// pooled upstream connection it may be reused.
		n, err = io.Copy(w, resp.Body)
		if err == nil && n != resp.ContentLength {
			err = fmt.Errorf("response body of %d bytes, %d declared", n, resp.ContentLength)
		}
	default:
		n, err = copyFlushing(w, resp.Body)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		// The framing promised to the client is broken; only closing the
		// connection tells it so.
		return n, true, err
	}
	return n, close, nil
}

// copyFlushing copies a body of unknown length to w to be delimited by
// the connection's close, flushing after each read as copyChunked does.
func copyFlushing(w *bufio.Writer, body io.Reader) (int64, error) {
	return copyReads(w, body, 0, 0, func(buf []byte, m int) []byte { return buf[:m] })
}

// chunkFrame is the most a chunk of copyChunked takes, its size line and
// closing CRLF included: two TLS records' worth of plaintext, so a full
// chunk goes out as two full records.
const chunkFrame = 32 << 10

// frames are the buffers streamed bodies are copied through: a stream
// of a few events would otherwise cost a fresh 32 KiB to allocate and
// clear before its first byte, and its share of a collection after.
var frames = sync.Pool{New: func() any {
	b := make([]byte, chunkFrame)
	return &b
}}

// chunkHead is the room left before a chunk's data for its size line: four
// hex digits (a chunk is under 64 KiB) and CRLF.
const chunkHead = 6

// copyChunked copies a body of unknown length to w, one chunk per read,
// and flushes each: such a body may be a stream (server-sent events, a
// model's tokens) whose every part the client is waiting for, which
// would otherwise sit in w until it filled. The chunk's size line, data
// and CRLF are laid out in one buffer and handed to w in one Write, so a
// read's bytes go to the connection in one write (one TLS write, in whole
// records) rather than three: the size line, the data past w's buffer,
// and the CRLF with the flush.
func copyChunked(w *bufio.Writer, body io.Reader) (int64, error) {
	return copyReads(w, body, chunkHead, 2, func(buf []byte, m int) []byte {
		start := chunkHead - 2
		for v := m; ; v >>= 4 {
			start--
			buf[start] = hexDigits[v&0xf]
			if v < 0x10 {
				break
			}
		}
		buf[chunkHead-2], buf[chunkHead-1] = '\r', '\n'
		buf[chunkHead+m], buf[chunkHead+m+1] = '\r', '\n'
		return buf[start : chunkHead+m+2]
	})
}

// copyReads copies body to w one read at a time through a pooled frame,
// reading into the frame past head bytes and short of its last tail,
// writing what frame makes of the frame and the read's m bytes, and
// flushing after each.
func copyReads(w *bufio.Writer, body io.Reader, head, tail int, frame func(buf []byte, m int) []byte) (int64, error) {
	bp := frames.Get().(*[]byte)
	defer frames.Put(bp)
	buf := *bp
	data := buf[head : len(buf)-tail]
	var n int64
	for {
		m, rerr := body.Read(data)
		if m > 0 {
			if _, err := w.Write(frame(buf, m)); err != nil {
				return n, err
			}
			n += int64(m)
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
		switch {
		case rerr == io.EOF:
			return n, nil
		case rerr != nil:
			return n, rerr
		}
	}
}

const hexDigits = "0123456789abcdef"

// writeEndToEnd writes the fields of h a proxy forwards: no hop-by-hop
// field, none the Connection field names, no framing field (the caller
// frames the body itself), and no field with an invalid name or a control
// byte in a value.
func writeEndToEnd(w *bufio.Writer, h http.Header) {
	conn := tokens(h["Connection"])
	for k, vs := range h {
		if hopByHop[k] || k == "Content-Length" || conn != nil && conn[strings.ToLower(k)] || !isTokenString(k) {
			continue
		}
		for _, v := range vs {
			if !hasCTL(v) {
				writeField(w, k, strings.TrimSpace(v))
			}
		}
	}
}

func writeField(w *bufio.Writer, k, v string) {
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(v)
	w.WriteString("\r\n")
}

var hopByHop = func() map[string]bool {
	m := make(map[string]bool, len(hopByHopFields))
	for _, k := range hopByHopFields {
		m[k] = true
	}
	return m
}()

func writeStatusLine(w *bufio.Writer, minor, code int) {
	w.WriteString("HTTP/1.")
	w.WriteByte(byte('0' + minor))
	w.WriteByte(' ')
	w.WriteString(strconv.Itoa(code))
	w.WriteByte(' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	w.WriteString(text)
	w.WriteString("\r\n")
}

// WriteSimple writes a complete response with a small body and flushes.
func WriteSimple(w *bufio.Writer, minor, code int, header http.Header, body []byte, close bool) error {
	h := header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	if close {
		h["Connection"] = []string{"close"}
	} else if minor == 0 {
		h["Connection"] = []string{"keep-alive"}
	}
	writeStatusLine(w, minor, code)
	if err := h.Write(w); err != nil {
		return err
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Flush()
}

func hasCTL(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) >= 0
}

// RetryAfter is the Retry-After value for a refusal that passes at at:
// whole seconds from now, rounded up, and at least 1.
func RetryAfter(at, now time.Time) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(at.Sub(now).Seconds()))), 10)
}
