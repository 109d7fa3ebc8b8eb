package gateway

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/mcp"
	"github.com/impyard/impyard/lib/store"
)

// RecordSchema marks a decision record among the other lines of the audit
// log it shares.
var RecordSchema = store.Schema("decision", 1)

// OutcomeSchema marks the line that completes the decision record of a
// forwarded request or a tunnel: the decision is written, and must be
// accepted, before anything is forwarded; what came of it (status, bytes,
// errors) is only known afterwards.
var OutcomeSchema = store.Schema("outcome", 1)

// Field names of a decision record, the one line written per request.
const (
	FieldSchema     = "schema"
	FieldID         = "decision_id"
	FieldTime       = "ts"    // whole seconds, UTC
	FieldTimeMS     = "ts_ms" // the same instant in unix milliseconds
	FieldVerdict    = "verdict"
	FieldRule       = "rule"
	FieldReason     = "reason"
	FieldWouldDeny  = "would_deny"
	FieldRefusedBy  = "refused_by"
	FieldClient     = "client"
	FieldRequest    = "request"
	FieldAddr       = "addr"
	FieldStatus     = "status"
	FieldUpstreamMS = "upstream_ms"
	FieldBytesIn    = "bytes_in"
	FieldBytesOut   = "bytes_out"
	FieldError      = "error"
	FieldUsage      = "usage" // a Usage, on the outcome of a metered exchange

	// Members of the request object, in the judge's vocabulary.
	FieldImp          = "imp"
	FieldProtocol     = "protocol"
	FieldMethod       = "method"
	FieldHost         = "host"
	FieldPort         = "port"
	FieldPath         = "path"
	FieldQuery        = "query"
	FieldHeaders      = "headers"
	FieldBodySize     = "bodySize"
	FieldMCP          = "mcp"
	FieldMCPError     = "mcp_error"
	FieldPlaceholders = "placeholders"

	// Members of the mcp object and of a placeholder.
	FieldMCPBatch  = "batch"
	FieldMCPCalls  = "calls"
	FieldMCPMethod = "method"
	FieldMCPTool   = "tool"
	FieldWhere     = "where"
	FieldSecret    = "secret"
)

// Verdicts as recorded: the judge's three, and reject for a request too
// malformed to judge (answered 400, 408, 413, 414, 431, 501 or 505).
const (
	VerdictAllow  = "allow"
	VerdictDeny   = "deny"
	VerdictTunnel = "tunnel"
	VerdictReject = "reject"
)

// RefusedByGateway marks a record whose verdict is the gateway's own, not
// the judge's: a request the judge allowed or never saw, refused for a
// reason no policy changes (domain fronting, no such host, a loop, a body
// it cannot inspect, an unwritable log). Replay does not re-judge these.
const RefusedByGateway = "gateway"

// Redacted replaces the value of a sensitive header in a record.
// It is the judge's marker, so a replayed query counts it as present.
const Redacted = judge.RecordRedacted

// sensitive headers have their values replaced by Redacted; their presence
// is still recorded.
var sensitive = map[string]bool{
	"api-key":              true,
	"authorization":        true,
	"cookie":               true,
	"set-cookie":           true,
	"x-access-token":       true,
	"x-amz-security-token": true,
	"x-api-key":            true,
	"x-auth-token":         true,
	"x-goog-api-key":       true,
	"private-token":        true,
	"proxy-authorization":  true,
}

// credentialParams name, lower-cased, the query parameters whose values
// records never hold: those APIs and signed URLs carry a credential in.
// A name ending in one after '-', '_' or '.' is one too (client_secret,
// X-Amz-Signature, refresh_token).
var credentialParams = []string{"token", "access_token", "api_key", "key", "sig", "signature", "password", "secret"}

// credentialParam reports whether a query parameter's name, as sent
// (percent-encoded or not, any case), names a credential, or one the
// policy's redact list (extra, lower-cased) names.
func credentialParam(name string, extra []string) bool {
	// Decoded until it stops changing (a few rounds at most): a server
	// that decodes twice reads %2574oken as token.
	for range 4 {
		u, err := url.QueryUnescape(name)
		if err != nil || u == name {
			break
		}
		name = u
	}
	name = strings.ToLower(name)
	if slices.Contains(extra, name) {
		return true
	}
	for _, c := range credentialParams {
		if base, ok := strings.CutSuffix(name, c); ok && (base == "" || strings.ContainsAny(base[len(base)-1:], "-_.")) {
			return true
		}
	}
	return false
}

// redactQuery replaces the value of every credential parameter of a raw
// query by Redacted, keeping the names, their order and the other values
// as sent.
func redactQuery(q string, extra []string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if name, _, ok := strings.Cut(p, "="); ok && credentialParam(name, extra) {
			parts[i] = name + "=" + Redacted
		}
	}
	return strings.Join(parts, "&")
}

// redactTarget redacts a request target as sent: its user information
// and its credential parameters.
func redactTarget(target string, extra []string) string {
	target = redactUserinfo(target)
	i := strings.IndexByte(target, '?')
	if i < 0 {
		return target
	}
	end := len(target)
	if j := strings.IndexByte(target[i:], '#'); j >= 0 {
		end = i + j
	}
	return target[:i+1] + redactQuery(target[i+1:end], extra) + target[end:]
}

// Record is one decision: what was asked, what the judge said, and what
// happened. It never holds a body, a secret, or the value of a sensitive
// header.
type Record struct {
	ID         string
	Time       time.Time
	Verdict    string
	Rule       string
	Reason     string
	WouldDeny  bool
	RefusedBy  string // RefusedByGateway, or "" when the verdict is the judge's
	Client     string // the client's address
	Request    RequestInfo
	Addr       string // the upstream ip:port dialed, or the one the judge refused
	Status     int    // the status returned to the client, 0 if none was
	UpstreamMS float64
	BytesIn    int64 // body bytes from the client (all bytes, for a tunnel)
	BytesOut   int64 // body bytes to the client (all bytes, for a tunnel)
	Error      string
	Usage      *Usage // the model usage of a metered response, nil if none was metered

	// task is the task the subject's token was issued for, "" for none:
	// what the gateway's spend is counted against.
	task string
	// shown, when set, is the reason the client is told instead of
	// Reason, which names what only the host may know.
	shown string
	// retry, when set, is the Retry-After the client is told.
	retry string
	// call is the record's id once Admit admitted it with a reservation
	// to settle, "" otherwise.
	call string
	// redact lists the policy's headers and parameters to redact.
	redact []string
}

// RequestInfo is the judged request as recorded.
type RequestInfo struct {
	Imp          string // the subject; "" is recorded as null
	Protocol     string
	Method       string
	Host         string
	Port         int
	Path         string
	Query        string
	Headers      map[string]string // lower-case names, values joined, sensitive ones redacted
	BodySize     int64             // as judged: decoded, when sent with a Content-Encoding
	MCP          *mcp.Lifted
	MCPError     string
	Placeholders []judge.Placeholder
}

// newID returns a random UUIDv4. The runtime's generator (ChaCha8 seeded
// from the kernel) is unpredictable enough for an identifier and costs no
// system call per record.
func newID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// RecordHeaders renders h for a record: names lower-cased, repeated values
// joined with ", ", and the values of sensitive headers and of extra (the
// header a rule injects into, those the policy's redact list names)
// replaced by Redacted.
func RecordHeaders(h http.Header, extra ...string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, vs := range h {
		k = lowerName(k)
		if sensitive[k] || slices.ContainsFunc(extra, func(e string) bool { return strings.EqualFold(e, k) }) {
			out[k] = Redacted
			continue
		}
		out[k] = strings.Join(vs, ", ")
	}
	return out
}

// lowerName is strings.ToLower for a header name, without a copy for the
// names most requests carry.
func lowerName(k string) string {
	if l, ok := lowerNames[k]; ok {
		return l
	}
	return strings.ToLower(k)
}

var lowerNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Anthropic-Version", "Authorization",
		"Cache-Control", "Connection", "Content-Encoding", "Content-Length", "Content-Type", "Cookie", "Host",
		"If-Modified-Since", "If-None-Match", "Openai-Organization", "Origin", "Pragma", "Proxy-Authorization",
		"Range", "Referer", "Transfer-Encoding", "Upgrade", "User-Agent", "X-Api-Key", "X-Forwarded-For"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

// redactUserinfo replaces the user information of a request target as
// sent (absolute URL or CONNECT authority), which may hold a password,
// by Redacted.
func redactUserinfo(target string) string {
	if strings.HasPrefix(target, "/") {
		return target
	}
	// What precedes "://" is a scheme only if it is spelt as one
	// (RFC 3986 3.1); otherwise "://" is inside the authority, as in
	// "pw@://", and the user information starts at the beginning.
	start := 0
	if i := strings.Index(target, "://"); i >= 0 && isScheme(target[:i]) {
		start = i + 3
	}
	end := len(target)
	if i := strings.IndexAny(target[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndexByte(target[start:end], '@')
	if at < 0 {
		return target
	}
	return target[:start] + Redacted + target[start+at:]
}

// isScheme reports whether s is spelt as a URI scheme: a letter, then
// letters, digits, '+', '-' and '.'.
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// MarshalJSON writes the record's fields in a fixed order under the Field
// names.
func (r *Record) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, 1024)), nil
}

func (r *Record) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = field(b, FieldSchema, true)
	b = appendString(b, RecordSchema)
	b = field(b, FieldID, false)
	b = appendString(b, r.ID)
	b = appendTime(b, r.Time)
	b = field(b, FieldVerdict, false)
	b = appendString(b, r.Verdict)
	b = field(b, FieldRule, false)
	b = appendString(b, r.Rule)
	b = field(b, FieldReason, false)
	b = appendString(b, r.Reason)
	if r.WouldDeny {
		b = field(b, FieldWouldDeny, false)
		b = append(b, "true"...)
	}
	if r.RefusedBy != "" {
		b = field(b, FieldRefusedBy, false)
		b = appendString(b, r.RefusedBy)
	}
	if r.Client != "" {
		b = field(b, FieldClient, false)
		b = appendString(b, r.Client)
	}
	b = field(b, FieldRequest, false)
	b = r.Request.appendJSON(b)
	if r.Addr != "" {
		b = field(b, FieldAddr, false)
		b = appendString(b, r.Addr)
	}
	return r.appendExchange(b)
}

// appendOutcomeJSON writes the outcome line of a forwarded exchange: the
// decision it completes and the fields only the exchange could fill.
func (r *Record) appendOutcomeJSON(b []byte, end time.Time) []byte {
	b = append(b, '{')
	b = field(b, FieldSchema, true)
	b = appendString(b, OutcomeSchema)
	b = field(b, FieldID, false)
	b = appendString(b, r.ID)
	b = appendTime(b, end)
	return r.appendExchange(b)
}

// appendTime writes t as FieldTime, in whole seconds, and FieldTimeMS,
// in unix milliseconds.
func appendTime(b []byte, t time.Time) []byte {
	b = field(b, FieldTime, false)
	b = append(b, '"')
	b = store.AppendTime(b, t)
	b = append(b, '"')
	b = field(b, FieldTimeMS, false)
	return strconv.AppendInt(b, store.Millis(t), 10)
}

// parseTime reads a record's time: FieldTime, RFC 3339 with or without a
// fraction (records written before FieldTimeMS had nanoseconds), made
// precise by FieldTimeMS when the record has it and it falls in the
// second FieldTime names.
func parseTime(m map[string]json.RawMessage, ts string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", FieldTime, err)
	}
	var ms int64
	if err := optional(m, FieldTimeMS, &ms); err != nil {
		return time.Time{}, err
	}
	if ms != 0 {
		if p := store.FromMillis(ms); store.Second(p).Equal(store.Second(t)) {
			return p, nil
		}
	}
	return t, nil
}

// appendExchange writes what the exchange filled in, the fields a decision
// record and an outcome line share, and closes the object.
func (r *Record) appendExchange(b []byte) []byte {
	b = field(b, FieldStatus, false)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.UpstreamMS > 0 {
		b = field(b, FieldUpstreamMS, false)
		b = strconv.AppendFloat(b, math.Round(r.UpstreamMS*1000)/1000, 'f', -1, 64)
	}
	b = field(b, FieldBytesIn, false)
	b = strconv.AppendInt(b, r.BytesIn, 10)
	b = field(b, FieldBytesOut, false)
	b = strconv.AppendInt(b, r.BytesOut, 10)
	if r.Error != "" {
		b = field(b, FieldError, false)
		b = appendString(b, r.Error)
	}
	if u := r.Usage; u != nil {
		b = field(b, FieldUsage, false)
		b = append(b, `{"model":`...)
		b = appendString(b, u.Model)
		b = append(b, `,"input_tokens":`...)
		b = strconv.AppendInt(b, u.InputTokens, 10)
		b = append(b, `,"output_tokens":`...)
		b = strconv.AppendInt(b, u.OutputTokens, 10)
		if u.Unknown {
			b = append(b, `,"unknown":true`...)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// Outcome is what an outcome line adds to the decision record it names.
type Outcome struct {
	ID         string
	Time       time.Time // when the exchange ended
	Status     int
	UpstreamMS float64
	BytesIn    int64
	BytesOut   int64
	Error      string
	Usage      *Usage
}

// ParseOutcome reads an outcome line; a line of another schema returns
// ErrNotOutcome.
func ParseOutcome(line []byte) (*Outcome, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	var schema string
	if err := json.Unmarshal(m[FieldSchema], &schema); err != nil || schema != OutcomeSchema {
		return nil, ErrNotOutcome
	}
	o := &Outcome{}
	var ts string
	for _, f := range []struct {
		name string
		dst  any
	}{
		{FieldID, &o.ID}, {FieldTime, &ts}, {FieldStatus, &o.Status}, {FieldUpstreamMS, &o.UpstreamMS},
		{FieldBytesIn, &o.BytesIn}, {FieldBytesOut, &o.BytesOut}, {FieldError, &o.Error}, {FieldUsage, &o.Usage},
	} {
		if err := optional(m, f.name, f.dst); err != nil {
			return nil, err
		}
	}
	var err error
	if o.Time, err = parseTime(m, ts); err != nil {
		return nil, err
	}
	return o, nil
}

// ErrNotOutcome is returned by ParseOutcome for a line of another kind.
var ErrNotOutcome = errors.New("not an outcome record")

// ReadRecords reads the decision records of an audit log, each completed
// by its outcome line when one was written; lines of other kinds are
// skipped, and damaged lines returned as by store.ReadJSONL.
func ReadRecords(path string) ([]*Record, []store.BadLine, error) {
	var out []*Record
	byID := map[string]*Record{}
	bad, err := store.ReadJSONL(path, func(line []byte) error {
		o, err := ParseOutcome(line)
		if err == nil {
			if r := byID[o.ID]; r != nil {
				r.Complete(o)
			}
			return nil
		}
		if !errors.Is(err, ErrNotOutcome) {
			return err
		}
		r, err := ParseRecord(line)
		switch {
		case errors.Is(err, ErrNotDecision):
			return nil
		case err != nil:
			return err
		}
		if prev := byID[r.ID]; prev != nil {
			// A forward refused after its decision was written in part:
			// the refusal is the record.
			*prev = *r
			return nil
		}
		byID[r.ID] = r
		out = append(out, r)
		return nil
	})
	return out, bad, err
}

// Complete fills r with the outcome of its exchange.
func (r *Record) Complete(o *Outcome) {
	r.Status, r.UpstreamMS, r.BytesIn, r.BytesOut, r.Error, r.Usage = o.Status, o.UpstreamMS, o.BytesIn, o.BytesOut, o.Error, o.Usage
}

func (q *RequestInfo) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = field(b, FieldImp, true)
	if q.Imp == "" {
		b = append(b, "null"...)
	} else {
		b = appendString(b, q.Imp)
	}
	b = field(b, FieldProtocol, false)
	b = appendString(b, q.Protocol)
	b = field(b, FieldMethod, false)
	b = appendString(b, q.Method)
	b = field(b, FieldHost, false)
	b = appendString(b, q.Host)
	b = field(b, FieldPort, false)
	b = strconv.AppendInt(b, int64(q.Port), 10)
	b = field(b, FieldPath, false)
	b = appendString(b, q.Path)
	b = field(b, FieldQuery, false)
	b = appendString(b, q.Query)
	b = field(b, FieldHeaders, false)
	b = append(b, '{')
	var stack [32]string
	keys := stack[:0]
	for k := range q.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, q.Headers[k])
	}
	b = append(b, '}')
	b = field(b, FieldBodySize, false)
	b = strconv.AppendInt(b, q.BodySize, 10)
	b = field(b, FieldMCP, false)
	if q.MCP == nil || q.MCP.Calls == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		b = field(b, FieldMCPBatch, true)
		b = strconv.AppendBool(b, q.MCP.Batch)
		b = field(b, FieldMCPCalls, false)
		b = append(b, '[')
		for i, c := range q.MCP.Calls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = field(b, FieldMCPMethod, true)
			b = appendString(b, c.Method)
			if c.Tool != "" {
				b = field(b, FieldMCPTool, false)
				b = appendString(b, c.Tool)
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	if q.MCPError != "" {
		b = field(b, FieldMCPError, false)
		b = appendString(b, q.MCPError)
	}
	if len(q.Placeholders) > 0 {
		b = field(b, FieldPlaceholders, false)
		b = append(b, '[')
		for i, p := range q.Placeholders {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = field(b, FieldWhere, true)
			b = appendString(b, p.Where)
			b = field(b, FieldSecret, false)
			b = appendString(b, p.Secret)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func field(b []byte, name string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	b = appendString(b, name)
	return append(b, ':')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 (header values
// may carry any byte) becomes U+FFFD, as encoding/json does. Runs of
// bytes that need no escape are copied whole.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[done:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[done:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[done:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}

// ParseRecord reads a decision record line. A line of another schema (the
// audit log's other events) returns ErrNotDecision.
func ParseRecord(line []byte) (*Record, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	var schema string
	if err := json.Unmarshal(m[FieldSchema], &schema); err != nil || schema != RecordSchema {
		return nil, ErrNotDecision
	}
	r := &Record{}
	var ts string
	var q map[string]json.RawMessage
	for _, f := range []struct {
		name string
		dst  any
	}{
		{FieldID, &r.ID}, {FieldTime, &ts}, {FieldVerdict, &r.Verdict}, {FieldRule, &r.Rule},
		{FieldReason, &r.Reason}, {FieldWouldDeny, &r.WouldDeny}, {FieldRefusedBy, &r.RefusedBy}, {FieldClient, &r.Client},
		{FieldRequest, &q}, {FieldAddr, &r.Addr}, {FieldStatus, &r.Status},
		{FieldUpstreamMS, &r.UpstreamMS}, {FieldBytesIn, &r.BytesIn}, {FieldBytesOut, &r.BytesOut},
		{FieldError, &r.Error}, {FieldUsage, &r.Usage},
	} {
		if err := optional(m, f.name, f.dst); err != nil {
			return nil, err
		}
	}
	var err error
	if r.Time, err = parseTime(m, ts); err != nil {
		return nil, err
	}
	var imp *string
	var lifted *struct {
		Batch bool `json:"batch"`
		Calls []struct {
			Method string `json:"method"`
			Tool   string `json:"tool"`
		} `json:"calls"`
	}
	var placeholders []struct {
		Where  string `json:"where"`
		Secret string `json:"secret"`
	}
	rq := &r.Request
	for _, f := range []struct {
		name string
		dst  any
	}{
		{FieldImp, &imp}, {FieldProtocol, &rq.Protocol}, {FieldMethod, &rq.Method}, {FieldHost, &rq.Host},
		{FieldPort, &rq.Port}, {FieldPath, &rq.Path}, {FieldQuery, &rq.Query}, {FieldHeaders, &rq.Headers},
		{FieldBodySize, &rq.BodySize}, {FieldMCP, &lifted}, {FieldMCPError, &rq.MCPError},
		{FieldPlaceholders, &placeholders},
	} {
		if err := optional(q, f.name, f.dst); err != nil {
			return nil, fmt.Errorf("%s: %w", FieldRequest, err)
		}
	}
	if imp != nil {
		rq.Imp = *imp
	}
	if lifted != nil {
		rq.MCP = &mcp.Lifted{Batch: lifted.Batch, Calls: []mcp.Call{}}
		for _, c := range lifted.Calls {
			rq.MCP.Calls = append(rq.MCP.Calls, mcp.Call{Method: c.Method, Tool: c.Tool})
		}
	}
	for _, p := range placeholders {
		rq.Placeholders = append(rq.Placeholders, judge.Placeholder{Where: p.Where, Secret: p.Secret})
	}
	return r, nil
}

// ErrNotDecision is returned by ParseRecord for a line of another kind.
var ErrNotDecision = errors.New("not a decision record")

func optional(m map[string]json.RawMessage, name string, dst any) error {
	raw, ok := m[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
