package gateway

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/impyard/impyard/lib/http1"
)

// Encoded request bodies: the gateway judges and meters a body sent
// with Content-Encoding gzip, br or zstd by what it decodes to, and
// forwards the bytes as they came, which decode to exactly what was
// judged. A body decodes to at most the body size limit: past it, it is
// refused as a likely compression bomb.
var (
	// ErrEncoding marks a Content-Encoding the gateway cannot undo.
	ErrEncoding = errors.New("cannot inspect a body with this Content-Encoding")
	// ErrUndecodable marks a body that does not decode as its
	// Content-Encoding says.
	ErrUndecodable = errors.New("body does not decode as its Content-Encoding says")
	// ErrBomb marks a body that decodes to more than the body size
	// limit.
	ErrBomb = errors.New("body decodes to more than the body size limit (a compression bomb?)")
)

// zstdWindow bounds the window a zstd frame may ask the decoder to
// hold, whatever the body's size: the memory one request can make the
// decoder take.
const zstdWindow = 8 << 20

// decodeBody is decode with the decoded bytes taken from the gateway's
// body budget (limit of them while decoding), which release gives back.
// A body the budget has no room for is refused with 503.
func (s *session) decodeBody(ce string, body []byte, limit int64) (decoded []byte, release func(), err error) {
	release = func() {}
	if !encoded(ce, body) {
		return body, release, nil
	}
	if !s.g.bodies.take(limit) {
		return nil, release, errBudget
	}
	if decoded, err = decode(ce, body, limit); err != nil {
		s.g.bodies.give(limit)
		return nil, release, err
	}
	s.g.bodies.give(limit - int64(len(decoded)))
	kept := int64(len(decoded))
	return decoded, func() { s.g.bodies.give(kept) }, nil
}

// encoded reports a non-empty body whose Content-Encoding ce is not
// identity.
func encoded(ce string, body []byte) bool {
	name := strings.TrimSpace(ce)
	return len(body) > 0 && name != "" && !strings.EqualFold(name, "identity")
}

// decode undoes a request body's Content-Encoding ce: none or identity
// leaves it as it is; gzip, br (brotli) and zstd decode it into at most
// limit bytes. The errors wrap ErrEncoding, ErrUndecodable or ErrBomb.
func decode(ce string, body []byte, limit int64) ([]byte, error) {
	if !encoded(ce, body) {
		return body, nil
	}
	name := strings.ToLower(strings.TrimSpace(ce))
	var r io.Reader
	switch name {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("%w (gzip): %w", ErrUndecodable, err)
		}
		// Every member is read, as most servers do; bytes after the last
		// that are not a member fail the decoding.
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdWindow), zstd.WithDecoderMaxMemory(uint64(limit)+1))
		if err != nil {
			return nil, fmt.Errorf("%w (zstd): %w", ErrUndecodable, err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("%w: %s (gzip, br and zstd are decoded)", ErrEncoding, clip(ce))
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	switch {
	case errors.Is(err, zstd.ErrWindowSizeExceeded):
		return nil, fmt.Errorf("%w: a zstd frame asks for a window past %d bytes", ErrBomb, zstdWindow)
	case n > limit || errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return nil, fmt.Errorf("%w: a %s body of %d bytes decodes past %d", ErrBomb, name, len(body), limit)
	case err != nil:
		return nil, fmt.Errorf("%w (%s): %w", ErrUndecodable, name, err)
	}
	return buf.Bytes(), nil
}

// errBudget is the answer to a body the gateway has no room to hold.
var errBudget = &http1.Error{Status: http.StatusServiceUnavailable, Reason: "the gateway holds as many request bodies as it may; retry shortly"}
