package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsFrame is one server frame (unmasked) of opcode op.
func wsFrame(op byte, fin, rsv1 bool, payload string) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		out = append(out, byte(n))
	case n <= 0xffff:
		out = append(out, 126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, 127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	return append(out, payload...)
}

func completed(model string, in, out int) string {
	return fmt.Sprintf(`{"type":"response.completed","response":{"id":"r","model":%q,"output":[],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}}`, model, in, out, in+out)
}

const wsCreated = `{"type":"response.created","response":{"id":"r","model":"gpt-5","usage":null}}`

// The frame meter totals every response's usage over the connection,
// whatever the frames' split, fragmentation, control frames between
// fragments and length encodings, and calls the usage unknown when a
// text message could not be read.
func TestFrameMeter(t *testing.T) {
	done := completed("gpt-5", 9, 3)
	long := completed("gpt-5-long", 100, 200)
	long = long[:len(long)-1] + `,"pad":"` + strings.Repeat("x", 70000) + `"}`
	cat := func(frames ...[]byte) string { return string(bytes.Join(frames, nil)) }
	for _, tc := range []struct {
		name, stream string
		want         Usage
	}{
		{"two responses", cat(wsFrame(1, true, false, wsCreated), wsFrame(1, true, false, done), wsFrame(1, true, false, wsCreated), wsFrame(1, true, false, completed("gpt-5-mini", 20, 4))),
			Usage{Model: "gpt-5-mini", InputTokens: 29, OutputTokens: 7}},
		{"fragments around a ping", cat(wsFrame(1, false, false, done[:10]), wsFrame(9, true, false, "ping"), wsFrame(0, false, false, done[10:40]), wsFrame(0, true, false, done[40:])),
			Usage{Model: "gpt-5", InputTokens: 9, OutputTokens: 3}},
		{"64-bit length", cat(wsFrame(2, true, false, "binary"), wsFrame(1, true, false, long)), Usage{Model: "gpt-5-long", InputTokens: 100, OutputTokens: 200}},
		{"no response", cat(wsFrame(1, true, false, wsCreated), wsFrame(8, true, false, "\x03\xe8")), Usage{Unknown: true}},
		{"a compressed message", cat(wsFrame(1, true, false, done), wsFrame(1, true, true, "\x00\x01")), Usage{Model: "gpt-5", InputTokens: 9, OutputTokens: 3, Unknown: true}},
		{"cut in a message", cat(wsFrame(1, true, false, done), wsFrame(1, false, false, done[:5])), Usage{Model: "gpt-5", InputTokens: 9, OutputTokens: 3, Unknown: true}},
		{"continuation of nothing", cat(wsFrame(0, true, false, done)), Usage{Unknown: true}},
		{"oversized ping", cat(wsFrame(9, true, false, strings.Repeat("p", 126)), wsFrame(1, true, false, done)), Usage{Unknown: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relaySplit(t, tc.stream, tc.want, func(r io.Reader) metered { return meterFrames(r) })
		})
	}
}

// meterFrames is a frame meter over the frames r holds, as if an
// upstream sent them.
func meterFrames(r io.Reader) *frameMeter {
	return newFrameMeter(struct {
		io.Reader
		io.Writer
		io.Closer
	}{r, io.Discard, io.NopCloser(nil)})
}

// A real WebSocket client reaches an upstream through the gateway under
// a rule with websocket set: the upgrade is recorded when it is allowed
// and closed with the bytes each way, and under a metering rule every
// response's usage on the socket is metered, with permessage-deflate
// kept off. Without the key the upgrade is denied and goes nowhere.
func TestWebSocketThroughGateway(t *testing.T) {
	var extensions atomic.Pointer[string]
	var upgrades atomic.Int64
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrades.Add(1)
		ext := r.Header.Get("Sec-WebSocket-Extensions")
		extensions.Store(&ext)
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := context.Background()
		for i := 1; ; i++ {
			_, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			for _, ev := range []string{wsCreated, `{"type":"response.output_text.delta","delta":"` + string(msg) + `"}`, completed("gpt-5", 10*i, len(msg))} {
				if c.Write(ctx, websocket.MessageText, []byte(ev)) != nil {
					return
				}
			}
		}
	}))
	var mu sync.Mutex
	var spent []Spend
	h := startGateway(t, policy(
		`{"name": "responses", "match": {"host": "api.test", "pathPrefix": "/v1/responses", "network": "127.0.0.0/8"}, "verdict": "allow", "websocket": true, "meter": "openai"}`,
		`{"name": "no-websocket", "match": {"host": "mail.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", "t-ws", nil }
			c.Meter = func(sp Spend) {
				mu.Lock()
				defer mu.Unlock()
				spent = append(spent, sp)
			}
		})
	h.resolve("api.test", "127.0.0.1")
	h.resolve("mail.test", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPClient: h.client(), CompressionMode: websocket.CompressionContextTakeover}
	c, resp, err := websocket.Dial(ctx, fmt.Sprintf("wss://api.test:%d/v1/responses", ups.port), opts)
	if err != nil {
		t.Fatalf("dial through the gateway: %v (%v)", err, resp)
	}
	for _, say := range []string{"hello", "again"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(say)); err != nil {
			t.Fatal(err)
		}
		for {
			_, ev, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(ev, []byte("response.completed")) {
				break
			}
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	r := h.last()
	if r.Verdict != VerdictAllow || r.Rule != "responses" || r.Status != http.StatusSwitchingProtocols || r.Request.Headers["upgrade"] != "websocket" {
		t.Errorf("record %+v", r)
	}
	if r.BytesIn == 0 || r.BytesOut == 0 {
		t.Errorf("closing record without bytes: in %d out %d", r.BytesIn, r.BytesOut)
	}
	want := Usage{Model: "gpt-5", InputTokens: 10 + 20, OutputTokens: 5 + 5}
	if r.Usage == nil || *r.Usage != want {
		t.Errorf("usage %+v, want %+v", r.Usage, want)
	}
	if e := extensions.Load(); e == nil || *e != "" {
		t.Errorf("the upstream was offered Sec-WebSocket-Extensions %q under a metering rule", *e)
	}
	mu.Lock()
	if n := len(spent); n == 0 || spent[n-1].Usage == nil || *spent[n-1].Usage != want {
		t.Errorf("spent %+v", spent)
	}
	mu.Unlock()

	n := upgrades.Load()
	_, resp, err = websocket.Dial(ctx, fmt.Sprintf("wss://mail.test:%d/", ups.port), &websocket.DialOptions{HTTPClient: h.client()})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("upgrade under a rule without websocket: %v %v", err, resp)
	}
	if r := h.last(); r.Verdict != VerdictDeny || !strings.Contains(r.Reason, "protocol upgrade") {
		t.Errorf("denied upgrade record %+v", r)
	}
	if upgrades.Load() != n {
		t.Error("a denied upgrade reached the upstream")
	}
}
