package mcpserv

import (
	"encoding/json"
	"strconv"
	"sync"
)

// NoteBuffer bounds the notifications a call's stream holds for a client
// that reads slower than the server writes: past it they are dropped,
// since the server's stdout, shared by every call of its process, must
// never wait on one client.
const NoteBuffer = 64

// CodeCancelled answers a call its caller cancelled, to the POST that
// is still waiting for it (the server itself answers nothing then).
const CodeCancelled = -32800

// listener is one call under way that the caller reads a stream of: it
// takes what the server says of that call while it runs.
type listener struct {
	token string          // the door's progress token for the call, "" for none
	orig  json.RawMessage // the caller's progress token
	// all: it also takes the notifications that name no call (log
	// messages, list changes). Only for a process of one imp: on a
	// shared one, they could be about another imp's call.
	all  bool
	send func(msg []byte)
}

// notes routes a process's notifications to the calls' streams.
type notes struct {
	mu   sync.Mutex
	next int64
	ls   map[*listener]struct{}
}

// listen registers a call's stream, rewriting params' progress token, if
// it has one, to one of the door's: two imps' calls to a shared server
// may name the same token, and each must see only its own progress.
// It returns the params to send and the end of the listening.
func (n *notes) listen(params json.RawMessage, all bool, send func([]byte)) (json.RawMessage, func()) {
	l := &listener{all: all, send: send}
	var p map[string]json.RawMessage
	var meta map[string]json.RawMessage
	if json.Unmarshal(params, &p) == nil && p["_meta"] != nil && json.Unmarshal(p["_meta"], &meta) == nil && meta["progressToken"] != nil {
		n.mu.Lock()
		n.next++
		l.token = strconv.Quote("impgw-p-" + strconv.FormatInt(n.next, 10))
		n.mu.Unlock()
		l.orig = meta["progressToken"]
		meta["progressToken"] = json.RawMessage(l.token)
		p["_meta"], _ = json.Marshal(meta)
		params, _ = json.Marshal(p)
	}
	n.mu.Lock()
	if n.ls == nil {
		n.ls = map[*listener]struct{}{}
	}
	n.ls[l] = struct{}{}
	n.mu.Unlock()
	return params, func() {
		n.mu.Lock()
		delete(n.ls, l)
		n.mu.Unlock()
	}
}

// route hands a notification the server wrote to the streams it is for,
// its secrets redacted: progress to the call whose token it names,
// anything else to every stream that takes all. One no stream takes is
// dropped: the door keeps no stream open between calls.
func (n *notes) route(line []byte, secrets []string) {
	var m struct {
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if m.Method == "notifications/progress" {
		tok := string(m.Params["progressToken"])
		for l := range n.ls {
			if l.token != "" && l.token == tok {
				m.Params["progressToken"] = l.orig
				b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": m.Method, "params": m.Params})
				if err == nil {
					l.send(Redact(b, secrets))
				}
				return
			}
		}
		return
	}
	out := Redact(line, secrets)
	for l := range n.ls {
		if l.all {
			l.send(out)
		}
	}
}

// abandon answers the door's request id as cancelled, to the caller
// still waiting for it: a server that honours a cancellation never
// answers the request, and the caller must not wait on it.
func (p *proc) abandon(id string) {
	p.mu.Lock()
	ch := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if ch != nil {
		ch <- json.RawMessage(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":` + strconv.Itoa(CodeCancelled) + `,"message":"request cancelled"}}`)
	}
}
