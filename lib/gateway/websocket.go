package gateway

import (
	"encoding/binary"
	"io"

	"github.com/impyard/impyard/lib/judge"
)

// frameMeter relays what an upstream sends after a WebSocket handshake
// and reads, from a copy, the usage of the OpenAI Responses API events
// among its frames (RFC 6455; a server's frames are unmasked): each text
// message holding a response object with its usage (response.completed,
// or response.incomplete or response.failed) adds that response's
// tokens. Nothing waits for the parse. A text message the meter cannot
// read (compressed, masked, past maxUsageBody) or framing it cannot
// follow makes the usage unknown, and never fails the relay.
type frameMeter struct {
	io.ReadWriteCloser

	head    []byte // the frame header so far
	left    uint64 // payload bytes of the current frame still to come
	inFrame bool   // the header is whole: payload follows
	control bool   // the current frame is a control frame, skipped
	fin     bool   // the current frame ends its message

	msg     []byte // the text message so far
	inMsg   bool
	binary  bool // the message is binary: no events, not read
	msgOver bool // the text message cannot be read: compressed, masked or too long
	broken  bool // the framing could not be followed: nothing more is read

	u       Usage
	seen    bool // a usage was read
	skipped bool // a text message, or the rest of the stream, went unread
}

func newFrameMeter(up io.ReadWriteCloser) *frameMeter {
	return &frameMeter{ReadWriteCloser: up}
}

func (m *frameMeter) Read(p []byte) (int, error) {
	n, err := m.ReadWriteCloser.Read(p)
	if n > 0 && !m.broken {
		m.feed(p[:n])
	}
	return n, err
}

// feed follows the frames in b, which continue those before it.
func (m *frameMeter) feed(b []byte) {
	for len(b) > 0 && !m.broken {
		if !m.inFrame {
			b = m.header(b)
			continue
		}
		k := min(uint64(len(b)), m.left)
		if !m.control && !m.binary && !m.msgOver {
			if uint64(len(m.msg))+k > maxUsageBody {
				m.msg, m.msgOver = m.msg[:0], true
			} else {
				m.msg = append(m.msg, b[:k]...)
			}
		}
		m.left -= k
		b = b[k:]
		if m.left == 0 {
			m.endFrame()
		}
	}
}

// headerLen is the length of the frame header h begins.
func headerLen(h []byte) int {
	if len(h) < 2 {
		return 2
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// header takes the bytes of a frame header from b, at most 14, and
// returns the rest.
func (m *frameMeter) header(b []byte) []byte {
	for len(b) > 0 {
		m.head = append(m.head, b[0])
		b = b[1:]
		if len(m.head) == headerLen(m.head) {
			m.startFrame()
			break
		}
	}
	return b
}

// startFrame reads the whole header in head.
func (m *frameMeter) startFrame() {
	h := m.head
	m.head = m.head[:0]
	m.fin = h[0]&0x80 != 0
	compressed, op, masked := h[0]&0x40 != 0, h[0]&0x0f, h[1]&0x80 != 0
	switch n := h[1] & 0x7f; n {
	case 126:
		m.left = uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		m.left = binary.BigEndian.Uint64(h[2:10])
	default:
		m.left = uint64(n)
	}
	m.inFrame, m.control = true, op >= 8
	switch {
	case m.control:
		if !m.fin || m.left > 125 {
			m.broken = true
		}
	case op == 0 && !m.inMsg, op != 0 && m.inMsg, op > 2:
		// A continuation of nothing, a new message inside one, or an
		// opcode of an extension never agreed to.
		m.broken = true
	case op != 0:
		m.inMsg, m.msg, m.binary, m.msgOver = true, m.msg[:0], op == 2, false
	}
	if m.broken {
		m.skipped = true
		return
	}
	if !m.control && (compressed || masked) {
		// permessage-deflate is kept off a metered handshake, and a
		// server never masks: such a message cannot be read as sent.
		m.msgOver = true
	}
	if m.left == 0 {
		m.endFrame()
	}
}

// endFrame closes the current frame, and its message when it was the
// last: a text message is read for usage.
func (m *frameMeter) endFrame() {
	m.inFrame = false
	if m.control || !m.fin {
		return
	}
	m.inMsg = false
	switch {
	case m.binary:
	case m.msgOver:
		m.skipped = true
	case hasUsage(m.msg, usageKey):
		r := usageReader{meter: judge.MeterOpenAI, key: usageKey}
		r.parse(m.msg)
		if r.seen {
			m.u.InputTokens += r.u.InputTokens
			m.u.OutputTokens += r.u.OutputTokens
			m.seen = true
		}
		if r.u.Model != "" {
			m.u.Model = r.u.Model
		}
	}
	m.msg = m.msg[:0]
	if cap(m.msg) > 64<<10 {
		// One long message should not pin its buffer for the socket's life.
		m.msg = nil
	}
}

// usage is what the frames relayed reported, over every response on the
// connection.
func (m *frameMeter) usage() *Usage {
	u := m.u
	u.Unknown = !m.seen || m.skipped || m.inMsg && !m.binary
	return &u
}
