package judge

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/mcp"
)

// matcher is a compiled rule match. Empty lists and maxBody < 0 mean the
// field was omitted and holds for anything.
type matcher struct {
	protocols []string
	hosts     []hostPattern
	ports     []int
	methods   []string // upper-case
	prefixes  []string
	headers   []headerCond
	maxBody   int64
	mcp       *mcpMatch
	networks  []netip.Prefix
	subjects  []pattern
	upgrade   bool // headerContains names upgrade: the rule may allow one
	connect   bool // method names CONNECT: the rule may allow a nested tunnel
	// eitherPath: a prefix need hold for the path read one way only, with
	// or without ;parameters (deny rules); else both ways (see path.go).
	eitherPath bool
	query      []queryCond
	queryExact bool        // a parameter not named in query is no match
	json       []valueCond // pointers into a JSON body
	jsonAbsent []valueCond // pointers that must not resolve (values nil)
	tasks      []pattern
	expires    time.Time // zero: never; else the rule holds only before it
}

type hostPattern struct {
	text   string // as written, for Explain
	any    bool
	suffix string // ".example.com" for *.example.com
	exact  string // canonical
}

type pattern struct {
	text string
	g    *glob.Pattern
}

type headerCond struct {
	name   string // lower-case
	substr string
}

type mcpMatch struct {
	methods   []string
	tools     []pattern
	arguments []valueCond // pointers into params.arguments of tools/call
}

// requestLevel reports fields that only a request, not a CONNECT, shows.
// A task and an expiry are among them: a CONNECT is judged without its
// task or the time, so a rule with either is decided per request.
func (m *matcher) requestLevel() bool {
	return len(m.methods) > 0 || len(m.prefixes) > 0 || len(m.headers) > 0 || m.maxBody >= 0 || m.mcp != nil ||
		m.query != nil || m.queryExact || m.json != nil || m.jsonAbsent != nil || m.tasks != nil || !m.expires.IsZero()
}

// field names the match field that failed, so that matching has one
// implementation and Explain only describes its outcome.
type field int

const (
	fieldNone field = iota
	fieldProtocol
	fieldPort
	fieldHost
	fieldSubject
	fieldMethod
	fieldPath
	fieldTraversal
	fieldBody
	fieldHeader
	fieldMCP
	fieldExpired
	fieldTask
	fieldQuery
	fieldJSON
	fieldArguments
	fieldUnknown // the body decides, and a record does not hold it
)

// input is a request with what the judge derives from it once.
type input struct {
	*Request
	addr      netip.Addr // resolved, or the IP host; invalid when unknown
	call      *mcp.Call  // the JSON-RPC call being judged, if any
	traversal bool       // the path has a traversal spelling
	upgrade   bool       // the request asks for a protocol upgrade
	path      string     // NormalPath of the request's path
	bare      string     // path without ;parameters

	// Read on first use, once per request however many rules ask.
	docs      *docTries
	params    []param
	paramsOK  bool
	paramsSet bool
	body      document
	bodySet   bool
	args      document
	argsOf    *mcp.Call // the call args was read from
}

// queryParams is the request's decoded query.
func (in *input) queryParams() ([]param, bool) {
	if !in.paramsSet {
		in.params, in.paramsOK = parseQuery(in.Query)
		in.paramsSet = true
	}
	return in.params, in.paramsOK
}

// jsonBody is the request body read against the policy's body pointers:
// only a body declared JSON, and not over MaxJSONBody, is read.
func (in *input) jsonBody() document {
	if !in.bodySet {
		in.bodySet = true
		// Indexed directly, not through net/textproto: the key is already
		// canonical, and that package links net, and with it cgo and the
		// C loader, into every command that judges or reads a policy.
		ct := in.Header["Content-Type"]
		if len(ct) == 1 && mcp.IsJSONType(ct[0]) && int64(len(in.Body)) == in.BodySize && len(in.Body) <= MaxJSONBody {
			in.body = readDocument(in.Body, in.docs.body, in.docs.bodySlots)
		}
	}
	return in.body
}

// arguments is the judged call's params.arguments read against the
// policy's argument pointers.
func (in *input) arguments() document {
	if in.argsOf != in.call {
		in.argsOf = in.call
		in.args = document{}
		if in.call != nil && in.call.Method == "tools/call" && len(in.call.Arguments) > 0 {
			in.args = readDocument(in.call.Arguments, in.docs.args, in.docs.argSlots)
		}
	}
	return in.args
}

// connectMismatch checks the fields a CONNECT shows. Network is left to
// the caller: what it means depends on whether the address is known.
func (m *matcher) connectMismatch(in *input) field {
	switch {
	case len(m.protocols) > 0 && !slices.Contains(m.protocols, in.Protocol):
		return fieldProtocol
	case len(m.ports) > 0 && !slices.Contains(m.ports, in.Port):
		return fieldPort
	case len(m.hosts) > 0 && !m.hostMatch(in.Host):
		return fieldHost
	case len(m.subjects) > 0 && (in.Subject == "" || !anyGlob(m.subjects, in.Subject)):
		return fieldSubject
	}
	return fieldNone
}

func (m *matcher) mismatch(in *input) field {
	if f := m.connectMismatch(in); f != fieldNone {
		return f
	}
	if f := m.timeMismatch(in); f != fieldNone {
		return f
	}
	if len(m.methods) > 0 && !containsFold(m.methods, in.Method) {
		return fieldMethod
	}
	if len(m.prefixes) > 0 {
		if in.traversal {
			return fieldTraversal
		}
		if !m.pathMatch(in) {
			return fieldPath
		}
	}
	if m.maxBody >= 0 && in.BodySize > m.maxBody {
		return fieldBody
	}
	for _, h := range m.headers {
		if !headerHas(in.Header, h.name, h.substr) {
			return fieldHeader
		}
	}
	if m.query != nil || m.queryExact {
		if !m.queryHolds(in) {
			return fieldQuery
		}
	}
	if m.json != nil || m.jsonAbsent != nil {
		if in.FromRecord {
			return fieldUnknown
		}
		if !m.jsonHolds(in) {
			return fieldJSON
		}
	}
	if m.mcp != nil {
		if !m.mcp.match(in.call) {
			return fieldMCP
		}
		if m.mcp.arguments != nil {
			if in.FromRecord {
				return fieldUnknown
			}
			if !m.argumentsHold(in) {
				return fieldArguments
			}
		}
	}
	return fieldNone
}

// timeMismatch checks the fields a request's circumstances decide: when
// it is judged and for which task.
func (m *matcher) timeMismatch(in *input) field {
	switch {
	case !m.expires.IsZero() && (in.Time.IsZero() || !in.Time.Before(m.expires)):
		return fieldExpired
	case m.tasks != nil && in.FromRecord:
		return fieldUnknown
	case m.tasks != nil && (in.Task == "" || !anyGlob(m.tasks, in.Task)):
		return fieldTask
	}
	return fieldNone
}

func (m *matcher) queryHolds(in *input) bool {
	params, ok := in.queryParams()
	if !ok {
		return false
	}
	for i := range m.query {
		if !m.query[i].holds(params, in.FromRecord) {
			return false
		}
	}
	if m.queryExact {
		for _, p := range params {
			if !slices.ContainsFunc(m.query, func(c queryCond) bool { return c.name == p.name }) {
				return false
			}
		}
	}
	return true
}

func (m *matcher) jsonHolds(in *input) bool {
	doc := in.jsonBody()
	return doc.ok && valuesHold(m.json, doc) && absentHold(m.jsonAbsent, doc)
}

func (m *matcher) argumentsHold(in *input) bool {
	doc := in.arguments()
	return doc.ok && valuesHold(m.mcp.arguments, doc)
}

func valuesHold(conds []valueCond, doc document) bool {
	for i := range conds {
		if !conds[i].holds(doc.values[conds[i].slot]) {
			return false
		}
	}
	return true
}

func absentHold(conds []valueCond, doc document) bool {
	for _, c := range conds {
		if doc.values[c.slot] != nil {
			return false
		}
	}
	return true
}

func (m *matcher) pathMatch(in *input) bool {
	has := func(path string) bool {
		return slices.ContainsFunc(m.prefixes, func(p string) bool { return strings.HasPrefix(path, p) })
	}
	if in.bare == in.path {
		return has(in.path)
	}
	if m.eitherPath {
		return has(in.path) || has(in.bare)
	}
	return has(in.path) && has(in.bare)
}

func (m *matcher) hostMatch(host string) bool {
	for _, h := range m.hosts {
		if h.any || host == h.exact || h.suffix != "" && len(host) > len(h.suffix) && strings.HasSuffix(host, h.suffix) {
			return true
		}
	}
	return false
}

func (mm *mcpMatch) match(c *mcp.Call) bool {
	if c == nil {
		return false
	}
	if len(mm.methods) > 0 && !slices.Contains(mm.methods, c.Method) {
		return false
	}
	return len(mm.tools) == 0 || c.Tool != "" && anyGlob(mm.tools, c.Tool)
}

func anyGlob(ps []pattern, s string) bool {
	for _, p := range ps {
		if p.g.Match(s) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, l := range list {
		if asciiEqualFold(l, s) {
			return true
		}
	}
	return false
}

// asciiEqualFold folds ASCII only: strings.EqualFold would let "ſ" stand
// for "s" in a method or header name.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// headerHas looks at every key, not just the canonical one, so that a
// header map built by hand cannot hide a header from a rule.
func headerHas(h map[string][]string, name, substr string) bool {
	for k, vs := range h {
		if asciiEqualFold(k, name) {
			for _, v := range vs {
				if strings.Contains(v, substr) {
					return true
				}
			}
		}
	}
	return false
}

// webSocket reports a WebSocket opening handshake (RFC 6455): a GET
// whose one Upgrade value is websocket. An Upgrade that lists other
// protocols too could be answered with one of those.
func webSocket(r *Request) bool {
	var up []string
	for k, vs := range r.Header {
		if asciiEqualFold(k, "upgrade") {
			up = append(up, vs...)
		}
	}
	return r.Method == "GET" && len(up) == 1 && asciiEqualFold(strings.TrimSpace(up[0]), "websocket")
}

func wantsUpgrade(h map[string][]string) bool {
	for k, vs := range h {
		if asciiEqualFold(k, "upgrade") {
			return true
		}
		if asciiEqualFold(k, "connection") {
			for _, v := range vs {
				for tok := range strings.SplitSeq(v, ",") {
					if asciiEqualFold(strings.TrimSpace(tok), "upgrade") {
						return true
					}
				}
			}
		}
	}
	return false
}

// traversal reports a path that a server may normalise into another
// path than the one a prefix was checked against: dot segments (also
// percent-encoded, also before a ;parameter), encoded slashes or
// backslashes (also double-encoded), and raw backslashes.
func traversal(p string) bool {
	for i := 0; i < len(p); i++ {
		switch {
		case p[i] == '\\':
			return true
		case p[i] == '%' && (encodedSep(p[i+1:]) || strings.HasPrefix(p[i+1:], "25") && (encodedSep(p[i+3:]) || encodedDot(p[i+3:]))):
			return true
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		seg, _, _ = strings.Cut(seg, ";")
		if dotSegment(seg) {
			return true
		}
	}
	return false
}

// encodedSep reports hex digits of / or \ at the start of s.
func encodedSep(s string) bool {
	return len(s) >= 2 && (asciiEqualFold(s[:2], "2f") || asciiEqualFold(s[:2], "5c"))
}

func encodedDot(s string) bool {
	return len(s) >= 2 && asciiEqualFold(s[:2], "2e")
}

func dotSegment(seg string) bool {
	dots := 0
	for i := 0; i < len(seg); {
		switch {
		case seg[i] == '.':
			i++
		case seg[i] == '%' && encodedDot(seg[i+1:]):
			i += 3
		default:
			return false
		}
		dots++
	}
	return dots == 1 || dots == 2
}

// why describes the failure mismatch found.
func (m *matcher) why(f field, in *input) string {
	switch f {
	case fieldProtocol:
		return "protocol " + in.Protocol + " not in " + list(m.protocols)
	case fieldPort:
		ports := make([]string, len(m.ports))
		for i, p := range m.ports {
			ports[i] = strconv.Itoa(p)
		}
		return "port " + strconv.Itoa(in.Port) + " not in " + list(ports)
	case fieldHost:
		hosts := make([]string, len(m.hosts))
		for i, h := range m.hosts {
			hosts[i] = h.text
		}
		return "host " + in.Host + " not in " + list(hosts)
	case fieldSubject:
		if in.Subject == "" {
			return "no subject, and the rule names subjects " + list(patterns(m.subjects))
		}
		return "subject " + quote(in.Subject) + " not in " + list(patterns(m.subjects))
	case fieldMethod:
		return "method " + in.Method + " not in " + list(m.methods)
	case fieldPath:
		return "path " + quote(in.path) + " has no prefix in " + list(m.prefixes)
	case fieldTraversal:
		return "path " + quote(in.Path) + " has a traversal spelling"
	case fieldBody:
		return "body size " + strconv.FormatInt(in.BodySize, 10) + " over " + strconv.FormatInt(m.maxBody, 10)
	case fieldHeader:
		for _, h := range m.headers {
			if !headerHas(in.Header, h.name, h.substr) {
				if h.substr == "" {
					return "no header " + h.name
				}
				return "no header " + h.name + " containing " + quote(h.substr)
			}
		}
	case fieldExpired:
		if in.Time.IsZero() {
			return "expires " + m.expires.UTC().Format(time.RFC3339) + " and the request's time is unknown"
		}
		return "expired " + m.expires.UTC().Format(time.RFC3339)
	case fieldTask:
		if in.Task == "" {
			return "no task, and the rule names tasks " + list(patterns(m.tasks))
		}
		return "task " + quote(in.Task) + " not in " + list(patterns(m.tasks))
	case fieldQuery, fieldJSON, fieldArguments:
		return m.conditions(in)
	case fieldUnknown:
		return "reads the request body or task, which a record does not hold: cannot be re-judged"
	case fieldMCP:
		switch c := in.call; {
		case c == nil:
			return "not a JSON-RPC request"
		case len(m.mcp.methods) > 0 && !slices.Contains(m.mcp.methods, c.Method):
			return "JSON-RPC method " + quote(c.Method) + " not in " + list(m.mcp.methods)
		case c.Tool == "":
			return "JSON-RPC method " + quote(c.Method) + " calls no tool, and the rule names tools " + list(patterns(m.mcp.tools))
		default:
			return "tool " + quote(c.Tool) + " not in " + list(patterns(m.mcp.tools))
		}
	}
	return "matches"
}

// conditions names each query, json and argument condition of the rule
// and whether it held, for Explain.
func (m *matcher) conditions(in *input) string {
	var out []string
	held := func(ok bool) string {
		if ok {
			return " held"
		}
		return " failed"
	}
	if m.query != nil || m.queryExact {
		params, ok := in.queryParams()
		if !ok {
			out = append(out, "query unreadable (malformed or double-encoded escape, control character or ;) failed")
		} else {
			for i := range m.query {
				out = append(out, m.query[i].describe()+held(m.query[i].holds(params, in.FromRecord)))
			}
			if m.queryExact {
				extra := ""
				for _, p := range params {
					if !slices.ContainsFunc(m.query, func(c queryCond) bool { return c.name == p.name }) {
						extra = p.name
						break
					}
				}
				if extra != "" {
					out = append(out, "queryExact failed (parameter "+quote(extra)+" is not named)")
				} else {
					out = append(out, "queryExact held")
				}
			}
		}
	}
	if m.json != nil || m.jsonAbsent != nil {
		doc := in.jsonBody()
		if !doc.ok {
			out = append(out, "body is not a JSON document the judge reads (declared JSON, at most 1 MiB, valid, no key twice on a pointer's path) failed")
		} else {
			for i := range m.json {
				c := &m.json[i]
				out = append(out, "json "+c.ptr.text+" = "+c.describe()+held(c.holds(doc.values[c.slot])))
			}
			for _, c := range m.jsonAbsent {
				out = append(out, "json "+c.ptr.text+" absent"+held(doc.values[c.slot] == nil))
			}
		}
	}
	if m.mcp != nil && m.mcp.arguments != nil && m.mcp.match(in.call) {
		doc := in.arguments()
		if !doc.ok {
			out = append(out, "arguments are not a JSON document the judge reads (valid, no key twice on a pointer's path) failed")
		} else {
			for i := range m.mcp.arguments {
				c := &m.mcp.arguments[i]
				out = append(out, "argument "+c.ptr.text+" = "+c.describe()+held(c.holds(doc.values[c.slot])))
			}
		}
	}
	return strings.Join(out, "; ")
}

func patterns(ps []pattern) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.text
	}
	return out
}

func list(items []string) string {
	return "[" + strings.Join(items, " ") + "]"
}
