package judge

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/impyard/impyard/lib/id"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/rate"
	"github.com/impyard/impyard/lib/strictjson"
)

// SchemaMajor is the policy schema this build reads: impyard.policy/1.
const SchemaMajor = 1

const schemaPrefix = "impyard.policy/"

// The file format. Match fields that take several JSON shapes stay raw
// here and are decoded one by one, so errors can name the field.
type policyFile struct {
	Schema     *string            `json:"schema"`
	Comment    json.RawMessage    `json:"comment"`
	Mode       *string            `json:"mode"`
	UpstreamCA *string            `json:"upstreamCA"`
	Redact     json.RawMessage    `json:"redact"`
	Rules      *[]json.RawMessage `json:"rules"`
}

type ruleFile struct {
	Name    *string         `json:"name"`
	Comment json.RawMessage `json:"comment"`
	Match   *matchFile      `json:"match"`
	Verdict *string         `json:"verdict"`
	Mode    *string         `json:"mode"`
	Inject  *injectFile     `json:"inject"`
	Meter   *string         `json:"meter"`
	// WebSocket and Timeout: see parseRule.
	WebSocket *bool   `json:"websocket"`
	Timeout   *string `json:"timeout"`
	Rate      *string `json:"rate"`
	Expires   *string `json:"expires"`
}

type matchFile struct {
	Protocol       json.RawMessage `json:"protocol"`
	Host           json.RawMessage `json:"host"`
	Port           json.RawMessage `json:"port"`
	Method         json.RawMessage `json:"method"`
	PathPrefix     json.RawMessage `json:"pathPrefix"`
	HeaderContains json.RawMessage `json:"headerContains"`
	MaxBodySize    json.RawMessage `json:"maxBodySize"`
	MCP            *mcpFile        `json:"mcp"`
	Network        json.RawMessage `json:"network"`
	Subject        json.RawMessage `json:"subject"`
	Query          json.RawMessage `json:"query"`
	QueryExact     *bool           `json:"queryExact"`
	JSON           json.RawMessage `json:"json"`
	JSONAbsent     json.RawMessage `json:"jsonAbsent"`
	Task           json.RawMessage `json:"task"`
}

type mcpFile struct {
	Method    json.RawMessage `json:"method"`
	Tool      json.RawMessage `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

type injectFile struct {
	Header *string `json:"header"`
	Secret *string `json:"secret"`
	Format *string `json:"format"`
}

// Load reads and parses a policy file; errors name the file.

// namePattern is the grammar of rule and secret names, for messages; id.ValidIntent checks it.
const namePattern = `^[a-z0-9][a-z0-9._-]{0,63}$`

func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse parses a policy. Every field is checked here, so that judging
// never meets a malformed rule.
func Parse(data []byte) (*Policy, error) {
	if err := strictjson.Valid(data); err != nil {
		return nil, inRule(err, data)
	}
	// The schema first: a file of another major may hold fields this
	// build does not know, and "unsupported schema" is the useful error.
	var head map[string]json.RawMessage
	if json.Unmarshal(data, &head) != nil {
		return nil, errors.New("policy must be a JSON object")
	}
	if err := checkSchema(head["schema"]); err != nil {
		return nil, err
	}
	var f policyFile
	if err := strictjson.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	p := &Policy{}
	if f.Comment != nil {
		if _, err := stringList(f.Comment); err != nil {
			return nil, fmt.Errorf("comment: %w", err)
		}
	}
	var err error
	if p.report, err = parseMode(f.Mode, false); err != nil {
		return nil, fmt.Errorf("mode: %w", err)
	}
	if f.UpstreamCA != nil {
		if !filepath.IsAbs(*f.UpstreamCA) {
			return nil, fmt.Errorf("upstreamCA: %q is not an absolute path", *f.UpstreamCA)
		}
		p.upstreamCA = *f.UpstreamCA
	}
	if f.Redact != nil {
		if p.redact, err = parseRedact(f.Redact); err != nil {
			return nil, fmt.Errorf("redact: %w", err)
		}
	}
	if f.Rules == nil {
		return nil, errors.New("rules: missing (an empty list denies everything)")
	}
	names := map[string]bool{}
	for i, raw := range *f.Rules {
		rl, err := parseRule(raw, p.report)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ruleLabel(i, raw), err)
		}
		if names[rl.name] {
			return nil, fmt.Errorf("%s: name: used by an earlier rule", ruleLabel(i, raw))
		}
		names[rl.name] = true
		p.rules = append(p.rules, rl)
	}
	p.docs = compileTries(p.rules)
	return p, nil
}

// docTries gathers the pointers of every rule, so that a request's body
// and each call's arguments are read once for all of them.
type docTries struct {
	body, args          *trie
	bodySlots, argSlots int
}

func compileTries(rules []rule) *docTries {
	d := &docTries{body: newTrie(), args: newTrie()}
	for i := range rules {
		m := &rules[i].m
		for j := range m.json {
			m.json[j].slot = d.body.add(m.json[j].ptr, &d.bodySlots)
		}
		for j := range m.jsonAbsent {
			m.jsonAbsent[j].slot = d.body.add(m.jsonAbsent[j].ptr, &d.bodySlots)
		}
		if m.mcp != nil {
			for j := range m.mcp.arguments {
				m.mcp.arguments[j].slot = d.args.add(m.mcp.arguments[j].ptr, &d.argSlots)
			}
		}
	}
	return d
}

func checkSchema(raw json.RawMessage) error {
	want := schemaPrefix + strconv.Itoa(SchemaMajor)
	var s string
	if raw == nil || json.Unmarshal(raw, &s) != nil || raw[0] != '"' {
		return fmt.Errorf("schema: missing (want %q)", want)
	}
	major, ok := strings.CutPrefix(s, schemaPrefix)
	if n, err := strconv.Atoi(major); !ok || err != nil || n < 0 || strconv.Itoa(n) != major {
		return fmt.Errorf("schema: %q is not %s<major>", s, schemaPrefix)
	}
	if s != want {
		return fmt.Errorf("schema: unsupported %q (this build reads %q)", s, want)
	}
	return nil
}

// ruleLabel names a rule in errors by index and, when it has one, name.
func ruleLabel(i int, raw json.RawMessage) string {
	label := "rules[" + strconv.Itoa(i) + "]"
	var r struct{ Name any }
	if json.Unmarshal(raw, &r) == nil {
		if name, ok := r.Name.(string); ok && name != "" {
			label += " " + quote(name)
		}
	}
	return label
}

func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

func parseMode(m *string, inherited bool) (report bool, err error) {
	switch {
	case m == nil:
		return inherited, nil
	case *m == "enforce":
		return false, nil
	case *m == "report":
		return true, nil
	}
	return false, fmt.Errorf("%q is not enforce or report", *m)
}

// inRule words a strict-decoding error inside a rule like the rule's
// other errors: `rules[2] "name": match: duplicate key "host"`.
func inRule(err error, data []byte) error {
	se, ok := errors.AsType[*strictjson.Error](err)
	if !ok {
		return err
	}
	rest, ok := strings.CutPrefix(se.Path, "$.rules[")
	if !ok {
		return err
	}
	index, field, _ := strings.Cut(rest, "]")
	i, _ := strconv.Atoi(index)
	var f struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if json.Unmarshal(data, &f) != nil || i >= len(f.Rules) {
		return err
	}
	return fmt.Errorf("%s: %w", ruleLabel(i, f.Rules[i]), fieldError(strings.TrimPrefix(field, "."), se.Msg))
}

func fieldError(field, msg string) error {
	if field == "" {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %s", field, msg)
}

func parseRule(raw json.RawMessage, policyReport bool) (rule, error) {
	var f ruleFile
	if err := strictjson.Unmarshal(raw, &f); err != nil {
		// The path is relative to the rule, which the caller names.
		if se, ok := errors.AsType[*strictjson.Error](err); ok {
			return rule{}, fieldError(strings.TrimPrefix(strings.TrimPrefix(se.Path, "$"), "."), se.Msg)
		}
		return rule{}, err
	}
	var rl rule
	switch {
	case f.Name == nil:
		return rule{}, errors.New("name: missing")
	case !id.ValidIntent(*f.Name):
		return rule{}, fmt.Errorf("name: %s does not match %s", quote(*f.Name), namePattern)
	}
	rl.name = *f.Name
	if f.Comment != nil {
		if _, err := stringList(f.Comment); err != nil {
			return rule{}, fmt.Errorf("comment: %w", err)
		}
	}
	switch {
	case f.Verdict == nil:
		return rule{}, errors.New("verdict: missing (allow, deny or tunnel)")
	case *f.Verdict == "allow":
		rl.verdict = Allow
	case *f.Verdict == "deny":
		rl.verdict = Deny
	case *f.Verdict == "tunnel":
		rl.verdict = Tunnel
	default:
		return rule{}, fmt.Errorf("verdict: %s is not allow, deny or tunnel", quote(*f.Verdict))
	}
	var err error
	if rl.report, err = parseMode(f.Mode, policyReport); err != nil {
		return rule{}, fmt.Errorf("mode: %w", err)
	}
	if f.Match != nil {
		if rl.m, err = parseMatch(f.Match); err != nil {
			return rule{}, fmt.Errorf("match.%w", err)
		}
	}
	if f.Expires != nil {
		if rl.m.expires, err = time.Parse(time.RFC3339, *f.Expires); err != nil {
			return rule{}, fmt.Errorf("expires: %s is not an RFC 3339 time like 2026-01-02T15:04:05Z", quote(*f.Expires))
		}
	}
	if f.Inject != nil {
		if rl.inject, err = parseInject(f.Inject); err != nil {
			return rule{}, fmt.Errorf("inject.%w", err)
		}
	}
	if f.Meter != nil {
		if rl.meter, err = parseMeter(*f.Meter, rl.verdict); err != nil {
			return rule{}, fmt.Errorf("meter: %w", err)
		}
		if rl.m.upgrade {
			// After the switch of protocols the gateway reads no
			// response, so a metered rule would let usage pass unseen;
			// a WebSocket's frames it does read (the websocket key).
			return rule{}, errors.New("meter: a metering rule cannot allow a protocol upgrade: the gateway reads no usage after it")
		}
	}
	if f.WebSocket != nil {
		rl.websocket = *f.WebSocket
		switch {
		case rl.websocket && rl.verdict != Allow:
			return rule{}, errors.New("websocket: only an allow rule lets a WebSocket through")
		case rl.websocket && rl.meter != "" && rl.meter != MeterOpenAI:
			// Frames are read only for the Responses API's events.
			return rule{}, fmt.Errorf("websocket: the gateway reads usage from WebSocket frames only under meter %s", MeterOpenAI)
		}
	}
	if f.Timeout != nil {
		if rl.timeout, err = parseTimeout(*f.Timeout, rl.verdict); err != nil {
			return rule{}, fmt.Errorf("timeout: %w", err)
		}
	}
	if f.Rate != nil {
		if rl.verdict != Allow {
			return rule{}, errors.New("rate: only an allow rule has requests to count: a deny refuses them all and a tunnel's are never seen")
		}
		if rl.rate, err = rate.Parse(*f.Rate); err != nil {
			return rule{}, fmt.Errorf("rate: %w", err)
		}
	}
	rl.m.eitherPath = rl.verdict == Deny
	if rl.inject != nil && rl.verdict != Tunnel && !httpsOnly(rl.m.protocols) {
		// Over plain http the secret would cross the network in clear,
		// readable by anyone on the path, whatever the host.
		return rule{}, errors.New(`inject: a rule that injects a secret must match protocol "https" only`)
	}
	if rl.verdict == Tunnel {
		// A tunnel is decided from the CONNECT alone and carries bytes the
		// gateway never reads: request fields could never hold, and there
		// is no request to inject into.
		if !rl.m.expires.IsZero() {
			return rule{}, errors.New("expires: a tunnel rule cannot expire: the gateway cannot close a pipe it opened when the rule ends")
		}
		if rl.m.requestLevel() {
			return rule{}, errors.New("verdict: a tunnel rule can match only protocol, host, port, network and subject")
		}
		if rl.inject != nil {
			return rule{}, errors.New("inject: a tunnel rule cannot inject")
		}
	}
	rl.label = "rule " + strconv.Quote(rl.name)
	rl.allowReason = rl.label + " allows it"
	rl.denyReason = rl.label + " denies it"
	rl.maybeReason = rl.label + " allows it if the destination address is in its network"
	return rl, nil
}

// httpsOnly reports a protocol list that can match https and nothing
// else; an empty list matches any protocol.
func httpsOnly(protocols []string) bool {
	return len(protocols) > 0 && !slices.Contains(protocols, "http")
}

func parseMatch(f *matchFile) (matcher, error) {
	m := matcher{maxBody: -1}
	var err error
	if f.Protocol != nil {
		if m.protocols, err = stringList(f.Protocol); err != nil {
			return m, fmt.Errorf("protocol: %w", err)
		}
		for _, p := range m.protocols {
			if p != "http" && p != "https" {
				return m, fmt.Errorf("protocol: %s is not http or https", quote(p))
			}
		}
	}
	if f.Host != nil {
		hosts, err := stringList(f.Host)
		if err != nil {
			return m, fmt.Errorf("host: %w", err)
		}
		for _, h := range hosts {
			hp, err := parseHost(h)
			if err != nil {
				return m, fmt.Errorf("host: %w", err)
			}
			m.hosts = append(m.hosts, hp)
		}
	}
	if f.Port != nil {
		if m.ports, err = portList(f.Port); err != nil {
			return m, fmt.Errorf("port: %w", err)
		}
	}
	if f.Method != nil {
		if m.methods, err = stringList(f.Method); err != nil {
			return m, fmt.Errorf("method: %w", err)
		}
		for i, meth := range m.methods {
			if !isToken(meth) {
				return m, fmt.Errorf("method: %s is not an HTTP method", quote(meth))
			}
			m.methods[i] = strings.ToUpper(meth)
			m.connect = m.connect || m.methods[i] == "CONNECT"
		}
	}
	if f.PathPrefix != nil {
		if m.prefixes, err = stringList(f.PathPrefix); err != nil {
			return m, fmt.Errorf("pathPrefix: %w", err)
		}
		for i, p := range m.prefixes {
			switch {
			case traversal(p):
				return m, fmt.Errorf("pathPrefix: %s has a traversal spelling", quote(p))
			case strings.Contains(p, ";"):
				return m, fmt.Errorf("pathPrefix: %s holds a ;parameter, which path rules never see", quote(p))
			}
			m.prefixes[i] = NormalPath(p)
		}
	}
	if f.HeaderContains != nil {
		if m.headers, err = parseHeaders(f.HeaderContains); err != nil {
			return m, fmt.Errorf("headerContains: %w", err)
		}
		for _, h := range m.headers {
			m.upgrade = m.upgrade || h.name == "upgrade"
		}
	}
	if f.MaxBodySize != nil {
		if err := json.Unmarshal(f.MaxBodySize, &m.maxBody); err != nil || f.MaxBodySize[0] == 'n' || m.maxBody < 0 {
			return m, fmt.Errorf("maxBodySize: %s is not a byte count (an integer from 0)", f.MaxBodySize)
		}
	}
	if f.MCP != nil {
		m.mcp = &mcpMatch{}
		if f.MCP.Method != nil {
			if m.mcp.methods, err = stringList(f.MCP.Method); err != nil {
				return m, fmt.Errorf("mcp.method: %w", err)
			}
		}
		if f.MCP.Tool != nil {
			if m.mcp.tools, err = globList(f.MCP.Tool); err != nil {
				return m, fmt.Errorf("mcp.tool: %w", err)
			}
		}
		if f.MCP.Arguments != nil {
			if m.mcp.arguments, err = parseValueConds(f.MCP.Arguments); err != nil {
				return m, fmt.Errorf("mcp.arguments: %w", err)
			}
		}
	}
	if f.Query != nil {
		if m.query, err = parseQueryConds(f.Query); err != nil {
			return m, fmt.Errorf("query: %w", err)
		}
	}
	if f.QueryExact != nil {
		m.queryExact = *f.QueryExact
	}
	if f.JSON != nil {
		if m.json, err = parseValueConds(f.JSON); err != nil {
			return m, fmt.Errorf("json: %w", err)
		}
	}
	if f.JSONAbsent != nil {
		ptrs, err := stringList(f.JSONAbsent)
		if err != nil {
			return m, fmt.Errorf("jsonAbsent: %w", err)
		}
		for _, text := range ptrs {
			p, err := parsePointer(text)
			if err != nil {
				return m, fmt.Errorf("jsonAbsent: %w", err)
			}
			m.jsonAbsent = append(m.jsonAbsent, valueCond{ptr: p})
		}
	}
	if f.Task != nil {
		if m.tasks, err = globList(f.Task); err != nil {
			return m, fmt.Errorf("task: %w", err)
		}
	}
	if f.Network != nil {
		nets, err := stringList(f.Network)
		if err != nil {
			return m, fmt.Errorf("network: %w", err)
		}
		for _, n := range nets {
			p, err := netip.ParsePrefix(n)
			switch {
			case err != nil:
				return m, fmt.Errorf("network: %s is not a CIDR prefix like 10.0.0.0/8", quote(n))
			case p.Addr().Is4In6():
				return m, fmt.Errorf("network: %s is IPv4-mapped; write the IPv4 prefix", quote(n))
			case p != p.Masked():
				return m, fmt.Errorf("network: %s has host bits set (did you mean %s?)", quote(n), p.Masked())
			}
			m.networks = append(m.networks, p)
		}
	}
	if f.Subject != nil {
		if m.subjects, err = globList(f.Subject); err != nil {
			return m, fmt.Errorf("subject: %w", err)
		}
	}
	return m, nil
}

func parseHost(h string) (hostPattern, error) {
	if h == "*" {
		return hostPattern{text: "*", any: true}, nil
	}
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		c, err := CanonicalHost(suffix)
		if err != nil {
			return hostPattern{}, err
		}
		if _, err := netip.ParseAddr(c); err == nil {
			return hostPattern{}, fmt.Errorf("%s: a wildcard cannot cover IP addresses", quote(h))
		}
		return hostPattern{text: h, suffix: "." + c}, nil
	}
	if strings.Contains(h, "*") {
		return hostPattern{}, fmt.Errorf("%s: a wildcard must be the whole host or a leading \"*.\"", quote(h))
	}
	c, err := CanonicalHost(h)
	if err != nil {
		return hostPattern{}, err
	}
	return hostPattern{text: c, exact: c}, nil
}

// stringList decodes a string or a non-empty array of non-empty strings.
func stringList(raw json.RawMessage) ([]string, error) {
	const want = "must be a string or a non-empty array of strings"
	var list []string
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errors.New(want)
		}
		list = []string{s}
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil || len(elems) == 0 {
			return nil, errors.New(want)
		}
		for _, e := range elems {
			var s string
			if e[0] != '"' || json.Unmarshal(e, &s) != nil {
				return nil, errors.New(want)
			}
			list = append(list, s)
		}
	default:
		return nil, errors.New(want)
	}
	for _, s := range list {
		if s == "" {
			return nil, errors.New("must not hold an empty string")
		}
	}
	return list, nil
}

func portList(raw json.RawMessage) ([]int, error) {
	var elems []json.RawMessage
	if raw[0] == '[' {
		if json.Unmarshal(raw, &elems) != nil || len(elems) == 0 {
			return nil, errors.New("must be a port number or a non-empty array of them")
		}
	} else {
		elems = []json.RawMessage{raw}
	}
	ports := make([]int, len(elems))
	for i, e := range elems {
		if json.Unmarshal(e, &ports[i]) != nil || e[0] == 'n' || ports[i] < 1 || ports[i] > 65535 {
			return nil, fmt.Errorf("%s is not a port number (1..65535)", e)
		}
	}
	return ports, nil
}

func globList(raw json.RawMessage) ([]pattern, error) {
	texts, err := stringList(raw)
	if err != nil {
		return nil, err
	}
	out := make([]pattern, len(texts))
	for i, t := range texts {
		g, err := glob.Compile(t)
		if err != nil {
			return nil, fmt.Errorf("bad glob %s: %w", quote(t), err)
		}
		out[i] = pattern{text: t, g: g}
	}
	return out, nil
}

// parseRedact reads the list of headers whose values records never hold.
func parseRedact(raw json.RawMessage) ([]string, error) {
	names, err := stringList(raw)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if !isToken(n) {
			return nil, fmt.Errorf("%s is not a header name", quote(n))
		}
		out = append(out, strings.ToLower(n))
	}
	return out, nil
}

func parseHeaders(raw json.RawMessage) ([]headerCond, error) {
	var m map[string]*string
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil, errors.New(`must be a non-empty object like {"header-name": "substring"}`)
	}
	seen := map[string]bool{}
	var out []headerCond
	for name, sub := range m {
		lower := strings.ToLower(name)
		switch {
		case !isToken(name):
			return nil, fmt.Errorf("%s is not a header name", quote(name))
		case seen[lower]:
			return nil, fmt.Errorf("header %s is named twice (names are case-insensitive)", quote(lower))
		case sub == nil:
			return nil, fmt.Errorf("%s: want a string (\"\" means present)", quote(name))
		}
		seen[lower] = true
		out = append(out, headerCond{name: lower, substr: *sub})
	}
	// Map order is random; a stable order keeps Explain stable.
	slices.SortFunc(out, func(a, b headerCond) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// Headers the gateway must never overwrite with a secret: they frame the
// message or steer the proxy.
var noInject = map[string]bool{
	"connection": true, "content-length": true, "host": true, "keep-alive": true,
	"proxy-authorization": true, "proxy-connection": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
}

func parseInject(f *injectFile) (*Inject, error) {
	switch {
	case f.Header == nil:
		return nil, errors.New("header: missing")
	case !isToken(*f.Header):
		return nil, fmt.Errorf("header: %s is not a header name", quote(*f.Header))
	case noInject[strings.ToLower(*f.Header)]:
		return nil, fmt.Errorf("header: %s cannot carry a secret", quote(*f.Header))
	case f.Secret == nil:
		return nil, errors.New("secret: missing")
	case !id.ValidIntent(*f.Secret):
		return nil, fmt.Errorf("secret: %s does not match %s", quote(*f.Secret), namePattern)
	}
	in := &Inject{Header: strings.ToLower(*f.Header), Secret: *f.Secret, Format: "%s"}
	if f.Format != nil {
		in.Format = *f.Format
		if strings.Count(in.Format, "%s") != 1 || strings.Count(in.Format, "%") != 1 {
			return nil, fmt.Errorf("format: %s must hold exactly one %%s and no other %%", quote(in.Format))
		}
		for _, c := range in.Format {
			if c < ' ' || c == 0x7f {
				return nil, fmt.Errorf("format: %s holds a control character", quote(in.Format))
			}
		}
	}
	return in, nil
}

// isToken reports an RFC 9110 token: a valid method or header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// parseMeter checks a rule's meter: a model API the gateway can read
// usage from, on a rule whose responses it reads.
func parseMeter(m string, v Verdict) (string, error) {
	if m != MeterOpenAI && m != MeterAnthropic && m != MeterGemini {
		return "", fmt.Errorf("%s is not %s, %s or %s", quote(m), MeterOpenAI, MeterAnthropic, MeterGemini)
	}
	if v != Allow {
		return "", errors.New("only an allow rule meters: the gateway reads no response of a deny or tunnel rule")
	}
	return m, nil
}

// MaxTimeout bounds a rule's timeout: a request that waits longer for
// its answer holds a connection slot and a body for no good reason.
const MaxTimeout = 24 * time.Hour

// parseTimeout reads a rule's upstream timeout, a Go duration such as
// "600s" or "10m", on a rule whose requests go upstream.
func parseTimeout(t string, v Verdict) (time.Duration, error) {
	d, err := time.ParseDuration(t)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s is not a duration like \"600s\" or \"10m\"", quote(t))
	case d <= 0 || d > MaxTimeout:
		return 0, fmt.Errorf("%s is not above 0 and at most %s", quote(t), MaxTimeout)
	case v != Allow:
		return 0, errors.New("only an allow rule has an upstream to wait for")
	}
	return d, nil
}
