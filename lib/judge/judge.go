// Package judge decides whether a request from a box may pass the egress
// gateway, against an ordered policy of rules (policies/gateway.json).
//
// What it guarantees:
//   - Deny is the zero Verdict, and every Decision carries a Reason, a
//     fixed readable phrase.
//   - First match wins; no match denies. A nil, unreadable or invalid
//     policy denies everything, and report mode never softens that.
//   - Never an open door: an allowed request whose destination address is
//     loopback, private, link-local or otherwise not public (see Special)
//     is denied unless the deciding rule's network covers that address.
//     So every Allow or Tunnel reached without an address has NeedsAddr
//     set: the gateway resolves the host, judges again with the address
//     (Request.Addr, or JudgeConnectAddr) and dials exactly that address.
//   - A Deny reached without an address is final: judging again with any
//     address denies too, so the gateway resolves no name it will refuse.
//   - Hosts match only in canonical form (CanonicalHost); a request whose
//     host is not canonical is denied.
//   - A credential placeholder passes only in the header where the
//     deciding rule injects that very secret.
//   - A protocol upgrade passes only under a rule whose headerContains
//     names upgrade, or, for a WebSocket upgrade (GET with Upgrade:
//     websocket alone), a rule with websocket set; a CONNECT inside a
//     request only under a rule whose method names CONNECT: the gateway
//     cannot read what follows.
//   - A JSON-RPC batch passes only if every call in it would pass alone.
//   - A query, JSON body or MCP arguments the judge cannot read without
//     guessing (see query.go and body.go) hold no condition on them; a
//     body is read once per request however many rules read it.
//   - A rule that expires matches nothing from its expires on, and
//     nothing when the request's time is unknown.
//
// A Policy is immutable and safe for concurrent use. The common case, an
// allowed request to a named host, does not allocate.
package judge

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/mcp"
	"github.com/impyard/impyard/lib/rate"
)

// Verdict is what the gateway does with a request. The zero value is
// Deny, so a forgotten assignment fails closed.
type Verdict int

const (
	Deny   Verdict = iota // refuse
	Allow                 // forward (after TLS interception, for HTTPS)
	Tunnel                // pipe the CONNECT through unread; only JudgeConnect returns it
	// Gate holds an MCP tool call for approval instead of making it: only
	// a rule that matches a tools/call returns it, only for a call sent
	// alone, and only the gateway's door to MCP servers acts on it.
	Gate
)

func (v Verdict) String() string {
	switch v {
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	case Tunnel:
		return "tunnel"
	case Gate:
		return "gate"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Request is what the gateway saw. The judge checks the fields it relies
// on and denies a request that breaks their contract.
type Request struct {
	Subject  string              // "" unknown, an imp name, "org", or "mcp:NAME" (a boxed MCP server)
	Protocol string              // "http" | "https"
	Method   string              // as sent
	Host     string              // canonical, from CanonicalHost
	Port     int                 // 1..65535
	Path     string              // as sent, not unescaped; rules see its NormalPath
	Query    string              // raw query, as sent; query rules see it decoded (see query.go)
	Header   map[string][]string // as received, hop-by-hop headers included
	BodySize int64               // bytes, after any Content-Encoding is undone

	MCP      *mcp.Lifted // nil: not JSON-RPC
	MCPError string      // non-empty: mcp.Lift refused the body, and the judge denies with this reason

	Addr netip.Addr // resolved destination; the zero Addr: not resolved yet

	Placeholders []Placeholder // from FindPlaceholders

	// Body is the body as forwarded, Content-Encoding undone; json rules
	// read it only when its length is BodySize.
	Body []byte
	Task string    // the task the subject's credentials were issued for; "" for none
	Time time.Time // when the request is judged; zero: no rule that expires matches
	// FromRecord: rebuilt from a decision record, which holds no body and
	// redacts some query values (see RecordRedacted), nor a task. A rule
	// reading the body or task then decides nothing: Decision.Unknown.
	FromRecord bool
}

// Decision is the judge's answer, with what the gateway needs to act on it.
type Decision struct {
	Verdict   Verdict
	Rule      string         // deciding rule; "" for the default deny and for a refused request
	Reason    string         // always set
	WouldDeny bool           // report mode turned a deny into this allow
	NeedsAddr bool           // resolve, then judge again with the address before connecting
	Networks  []netip.Prefix // the deciding rule's network field; read-only
	Inject    *Inject        // the deciding rule's credential, if any; read-only
	Meter     string         // the deciding rule's meter: MeterOpenAI, MeterAnthropic, MeterGemini or ""
	// WebSocket: the request asks for a WebSocket upgrade, which the
	// deciding rule's websocket key allows.
	WebSocket bool
	Timeout   time.Duration // the deciding rule's upstream timeout; 0 for the gateway's default
	// Unknown: the request came from a record, and the first rule that
	// could match reads the body or the task, which records do not hold.
	// The verdict is Deny, and no more than a placeholder.
	Unknown bool
	// Rated are the rules with a rate that allowed the request (each
	// call of a batch), each once: the gateway counts the request
	// against each per subject and refuses it past any (429).
	Rated []Rated
}

// Rated is a rule that allowed a request and the rate it allows it at.
type Rated struct {
	Rule string
	Rate rate.Limit
}

// Meters: the model APIs whose token usage the gateway reads from a
// response of a rule that names one.
const (
	MeterOpenAI    = "openai"
	MeterAnthropic = "anthropic"
	MeterGemini    = "gemini"
)

// Inject names a secret the gateway sets as a header on the way out.
type Inject struct {
	Header string // lower-case header name
	Secret string // secret name
	Format string // header value, with exactly one %s for the secret
}

// Trace is one step of Explain.
type Trace struct {
	Rule    string // "" for a refusal before any rule is tried
	Matched bool
	Why     string
}

// Rule is a read-only view of a policy rule.
type Rule struct {
	Name    string
	Verdict Verdict
	Mode    string // "enforce" or "report", after inheriting the policy's mode
}

// Policy is a parsed policy. A nil *Policy denies everything.
type Policy struct {
	rules      []rule
	docs       *docTries
	report     bool
	upstreamCA string
	redact     []string // lower-case header names
	unusable   string   // non-empty: deny everything with this reason
}

type rule struct {
	name        string
	label       string // rule "name", for reasons
	verdict     Verdict
	report      bool
	m           matcher
	inject      *Inject
	meter       string
	websocket   bool // the rule may allow a WebSocket upgrade
	timeout     time.Duration
	rate        rate.Limit // zero: no rate
	allowReason string
	denyReason  string
	maybeReason string
}

const (
	reasonNoPolicy  = "policy unusable: no policy loaded"
	reasonNoMatch   = "no rule matched"
	reasonTraversal = "path has a traversal spelling (dot segment, encoded slash or backslash) that no path rule accepts"
	reasonBatch     = "every call in the batch is allowed"
	reasonTerminate = "some rules match requests to this host: each request is judged"
)

// Broken returns a policy that denies everything, with err (why the real
// policy could not be loaded) in every reason.
func Broken(err error) *Policy {
	reason := "policy unusable"
	if err != nil {
		reason += ": " + err.Error()
	}
	return &Policy{unusable: reason}
}

// Redact lists, lower-cased, the headers whose values the policy's
// top-level "redact" keeps out of records, beyond those always redacted.
func (p *Policy) Redact() []string {
	if p == nil {
		return nil
	}
	return p.redact
}

// UpstreamCA is the extra trust bundle for upstream TLS, or "".
func (p *Policy) UpstreamCA() string {
	if p == nil {
		return ""
	}
	return p.upstreamCA
}

// Mode is the policy-wide mode, "enforce" or "report".
func (p *Policy) Mode() string {
	if p == nil || !p.report {
		return "enforce"
	}
	return "report"
}

// Rules lists the rules in order.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	out := make([]Rule, len(p.rules))
	for i, rl := range p.rules {
		out[i] = Rule{Name: rl.name, Verdict: rl.verdict, Mode: "enforce"}
		if rl.report {
			out[i].Mode = "report"
		}
	}
	return out
}

func deny(rule, reason string) Decision {
	return Decision{Rule: rule, Reason: reason}
}

// prepare refuses requests that no rule may see and derives what
// matching needs.
func (p *Policy) prepare(r *Request) (input, Decision, bool) {
	switch {
	case p == nil:
		return input{}, deny("", reasonNoPolicy), false
	case p.unusable != "":
		return input{}, deny("", p.unusable), false
	case r == nil:
		return input{}, deny("", "no request"), false
	case r.Protocol != "http" && r.Protocol != "https":
		return input{}, deny("", "protocol is not http or https"), false
	case r.Port < 1 || r.Port > 65535:
		return input{}, deny("", "port is not 1..65535"), false
	case !isToken(r.Method):
		return input{}, deny("", "method is not an HTTP token"), false
	case r.BodySize < 0:
		return input{}, deny("", "body size unknown"), false
	case r.MCPError != "":
		return input{}, deny("", r.MCPError), false
	}
	if c, err := CanonicalHost(r.Host); err != nil || c != r.Host {
		return input{}, deny("", "host is not in canonical form"), false
	}
	in := input{Request: r, upgrade: wantsUpgrade(r.Header), docs: p.docs}
	in.path = NormalPath(r.Path)
	// The normal form is checked too: a stray % before an escape ("%2%66")
	// is a double-encoded slash to a server that decodes twice, and reads
	// as one ("%252F") only once normalised.
	in.traversal = traversal(r.Path) || traversal(in.path)
	in.bare = bareSegments(in.path)
	if r.Addr.IsValid() {
		in.addr = r.Addr.WithZone("").Unmap()
	}
	if ipHost(r.Host) {
		ip, err := netip.ParseAddr(r.Host)
		if err != nil || in.addr.IsValid() && in.addr != ip {
			return input{}, deny("", "resolved address is not the IP host"), false
		}
		in.addr = ip
	}
	return in, Decision{}, true
}

// ipHost tells IP literals from names among canonical hosts, without
// the allocation a failed netip.ParseAddr costs.
func ipHost(host string) bool {
	return strings.Contains(host, ":") || numeric(host[strings.LastIndexByte(host, '.')+1:])
}

// Judge decides a request. See the package comment for what it
// guarantees.
func (p *Policy) Judge(r *Request) Decision {
	in, d, ok := p.prepare(r)
	if !ok {
		return d
	}
	if r.MCP == nil || len(r.MCP.Calls) == 0 {
		d, _ := p.judgeOne(&in)
		return d
	}
	if !r.MCP.Batch && len(r.MCP.Calls) == 1 {
		in.call = &r.MCP.Calls[0]
		d, _ := p.judgeOne(&in)
		return d
	}
	return p.judgeBatch(&in, r.MCP.Calls)
}

// judgeOne evaluates the rules for one request (or one call of a batch).
// maybe reports a provisional allow by a network rule that awaits the
// address.
func (p *Policy) judgeOne(in *input) (d Decision, maybe bool) {
	traversed := false
	for i := range p.rules {
		rl := &p.rules[i]
		switch rl.m.mismatch(in) {
		case fieldNone:
		case fieldTraversal:
			traversed = traversed || rl.verdict != Deny
			continue
		case fieldUnknown:
			return Decision{Rule: rl.name, Reason: rl.label + " reads the request body or task, which a record does not hold", Unknown: true}, false
		default:
			continue
		}
		if len(rl.m.networks) > 0 {
			if !in.addr.IsValid() {
				// A deny rule waits for the address. Skipping it cannot
				// turn a deny into an allow: with the address known it
				// can only add a deny.
				if rl.verdict == Deny {
					continue
				}
				return Decision{Verdict: rl.allows(), Rule: rl.name, Reason: rl.maybeReason, NeedsAddr: true, Networks: rl.m.networks, Inject: rl.inject, Meter: rl.meter, Timeout: rl.timeout, Rated: rl.rated()}, true
			}
			if !containsAddr(rl.m.networks, in.addr) {
				continue
			}
		}
		if rl.verdict == Deny {
			return soften(deny(rl.name, rl.denyReason), rl.report, in), false
		}
		return admit(Decision{Verdict: rl.allows(), Rule: rl.name, Reason: rl.allowReason, Networks: rl.m.networks, Inject: rl.inject, Meter: rl.meter, Timeout: rl.timeout, Rated: rl.rated()}, rl, in), false
	}
	reason := reasonNoMatch
	if traversed {
		reason = reasonTraversal
	}
	return soften(deny("", reason), p.report, in), false
}

// rated is the rule's rate as a Decision carries it, nil without one.
func (rl *rule) rated() []Rated {
	if rl.rate.IsZero() {
		return nil
	}
	return []Rated{{rl.name, rl.rate}}
}

// allows is what a matching rule that does not deny does with a request:
// a tunnel rule's request (seen when its host was terminated for another
// rule) is allowed, a gate rule's is gated.
func (rl *rule) allows() Verdict {
	if rl.verdict == Gate {
		return Gate
	}
	return Allow
}

// soften applies report mode to a deny: it becomes an allow that keeps
// the deny's reason, subject to the same floors as any allow.
func soften(d Decision, report bool, in *input) Decision {
	if !report {
		return d
	}
	return admit(Decision{Verdict: Allow, Rule: d.Rule, Reason: d.Reason, WouldDeny: true}, nil, in)
}

// admit applies the floors every allow must pass. rl is the deciding
// rule, nil for a deny softened by report mode, which allows nothing
// special.
func admit(d Decision, rl *rule, in *input) Decision {
	who := "report mode"
	if rl != nil {
		who = rl.label
	}
	switch {
	case in.upgrade && rl != nil && !rl.m.upgrade && rl.websocket && webSocket(in.Request):
		d.WebSocket = true
	case in.upgrade && (rl == nil || !rl.m.upgrade):
		return deny(d.Rule, "request asks for a protocol upgrade and "+who+" does not allow it")
	case asciiEqualFold(in.Method, "CONNECT") && (rl == nil || !rl.m.connect):
		return deny(d.Rule, "request is a nested CONNECT and "+who+" does not allow it")
	}
	for _, ph := range in.Placeholders {
		if rl == nil || rl.inject == nil || ph.Where != rl.inject.Header || ph.Secret != rl.inject.Secret {
			return deny(d.Rule, fmt.Sprintf("credential placeholder for %s in %s and %s does not inject it there", quote(ph.Secret), ph.Where, who))
		}
	}
	if !in.addr.IsValid() {
		d.NeedsAddr = true
		return d
	}
	if class, special := Special(in.addr); special && (rl == nil || !containsAddr(rl.m.networks, in.addr)) {
		return deny(d.Rule, "destination "+in.addr.String()+" is "+class+" and "+who+" does not allow that network")
	}
	return d
}

func containsAddr(nets []netip.Prefix, a netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// judgeBatch judges each call as if it were the request's only call. One
// HTTP request carries one credential, so calls allowed by rules that
// inject different ones are denied together.
func (p *Policy) judgeBatch(in *input, calls []mcp.Call) Decision {
	var out Decision
	provisional := false
	for i := range calls {
		in.call = &calls[i]
		d, maybe := p.judgeOne(in)
		if d.Verdict == Deny || d.WouldDeny {
			d.Reason = callLabel(i, in.call) + ": " + d.Reason
		}
		if d.Verdict == Deny {
			return d
		}
		if d.Verdict == Gate {
			// One gate holds one call: the calls around it would be made
			// or refused with it, unapproved.
			return deny(d.Rule, callLabel(i, in.call)+": "+d.Rule+" gates it, and a gated call must be sent alone, not in a batch")
		}
		provisional = provisional || maybe
		if i == 0 {
			out = d
			continue
		}
		// The injects of a provisional allow may change once the address
		// is known; the second judgement compares them.
		if !provisional && !sameInject(out.Inject, d.Inject) {
			return deny(d.Rule, callLabel(i, in.call)+": allowed by a rule with another credential than the calls before it")
		}
		out.NeedsAddr = out.NeedsAddr || d.NeedsAddr
		for _, r := range d.Rated {
			if !slices.ContainsFunc(out.Rated, func(o Rated) bool { return o.Rule == r.Rule }) {
				out.Rated = append(out.Rated, r)
			}
		}
		switch {
		case d.WouldDeny && !out.WouldDeny:
			out.WouldDeny, out.Rule, out.Reason = true, d.Rule, d.Reason
		case d.Rule != out.Rule && !out.WouldDeny:
			out.Reason = reasonBatch
		}
		if d.Rule != out.Rule {
			out.Networks = nil // no single rule's network speaks for the batch
		}
	}
	return out
}

func sameInject(a, b *Inject) bool {
	return a == b || a != nil && b != nil && *a == *b
}

func callLabel(i int, c *mcp.Call) string {
	s := "batch call " + strconv.Itoa(i) + " (method " + quote(c.Method)
	if c.Tool != "" {
		s += ", tool " + quote(c.Tool)
	}
	return s + ")"
}

// JudgeConnect decides a CONNECT from what it shows: host, port and
// subject, with protocol https. Tunnel: the first rule that matches on
// those alone (rules with request fields are skipped) is a tunnel rule.
// Allow: terminate TLS and judge each request. Deny: no rule could allow
// any request to this host and port, so refuse before the handshake.
// With NeedsAddr set, resolve the host and call JudgeConnectAddr.
func (p *Policy) JudgeConnect(host string, port int, subject string) Decision {
	return p.JudgeConnectAddr(host, port, subject, netip.Addr{})
}

// JudgeConnectAddr is JudgeConnect once the destination address is
// known; for a Tunnel it is the last check before the pipe.
func (p *Policy) JudgeConnectAddr(host string, port int, subject string, addr netip.Addr) Decision {
	in, d, ok := p.prepare(&Request{Subject: subject, Protocol: "https", Method: "CONNECT", Host: host, Port: port, Addr: addr})
	if !ok {
		return d
	}
	unknown := !in.addr.IsValid()
	possible := false // a rule with request fields might allow some request
	for i := range p.rules {
		rl := &p.rules[i]
		if rl.m.connectMismatch(&in) != fieldNone {
			continue
		}
		if rl.m.requestLevel() {
			possible = possible || rl.verdict != Deny || rl.report
			continue
		}
		if len(rl.m.networks) > 0 {
			if unknown {
				if rl.verdict == Deny {
					continue
				}
				return Decision{Verdict: rl.verdict, Rule: rl.name, Reason: rl.maybeReason, NeedsAddr: true, Networks: rl.m.networks}
			}
			if !containsAddr(rl.m.networks, in.addr) {
				continue
			}
		}
		switch {
		case rl.verdict == Tunnel:
			d := Decision{Verdict: Tunnel, Rule: rl.name, Reason: rl.label + " tunnels it", Networks: rl.m.networks}
			if unknown {
				d.NeedsAddr = true
			} else if class, special := Special(in.addr); special && !containsAddr(rl.m.networks, in.addr) {
				return deny(rl.name, "destination "+in.addr.String()+" is "+class+" and "+rl.label+" does not allow that network")
			}
			return d
		case rl.verdict == Allow:
			return Decision{Verdict: Allow, Rule: rl.name, Reason: rl.allowReason, NeedsAddr: unknown}
		case possible:
			return Decision{Verdict: Allow, Reason: reasonTerminate, NeedsAddr: unknown}
		case rl.report:
			return Decision{Verdict: Allow, Rule: rl.name, Reason: rl.denyReason, WouldDeny: true, NeedsAddr: unknown}
		}
		return deny(rl.name, rl.denyReason)
	}
	switch {
	case possible:
		return Decision{Verdict: Allow, Reason: reasonTerminate, NeedsAddr: unknown}
	case p.report:
		return Decision{Verdict: Allow, Reason: reasonNoMatch, WouldDeny: true, NeedsAddr: unknown}
	}
	return deny("", reasonNoMatch)
}

// Credentials reports whether r, a request or CONNECT without a subject
// that the policy does not allow, meets an allow or tunnel rule scoped
// to a subject in every other field, the network aside: proxy
// credentials could change the answer, so the gateway asks for them
// (407) rather than refuse. A CONNECT (r.Method CONNECT) is compared on
// what it shows.
func (p *Policy) Credentials(r *Request) bool {
	if r == nil || r.Subject != "" {
		return false
	}
	in, _, ok := p.prepare(r)
	if !ok {
		return false
	}
	if r.MCP != nil && !r.MCP.Batch && len(r.MCP.Calls) == 1 {
		in.call = &r.MCP.Calls[0]
	}
	connect := asciiEqualFold(r.Method, "CONNECT")
	for i := range p.rules {
		rl := &p.rules[i]
		if len(rl.m.subjects) == 0 || rl.verdict == Deny {
			continue
		}
		m := rl.m
		m.subjects, m.networks = nil, nil
		if connect && m.connectMismatch(&in) == fieldNone || !connect && m.mismatch(&in) == fieldNone {
			return true
		}
	}
	return false
}

// Explain says, for each rule in order up to the first that matches, why
// it did not match the request; for a batch, per call. A request refused
// before any rule is tried yields one Trace with the reason.
func (p *Policy) Explain(r *Request) []Trace {
	in, d, ok := p.prepare(r)
	if !ok {
		return []Trace{{Why: d.Reason}}
	}
	if r.MCP == nil || len(r.MCP.Calls) == 0 {
		return p.explain(&in, "")
	}
	var out []Trace
	for i := range r.MCP.Calls {
		in.call = &r.MCP.Calls[i]
		prefix := ""
		if r.MCP.Batch {
			prefix = callLabel(i, in.call) + ": "
		}
		out = append(out, p.explain(&in, prefix)...)
	}
	return out
}

func (p *Policy) explain(in *input, prefix string) []Trace {
	var out []Trace
	for i := range p.rules {
		rl := &p.rules[i]
		if f := rl.m.mismatch(in); f != fieldNone {
			out = append(out, Trace{Rule: rl.name, Why: prefix + rl.m.why(f, in)})
			continue
		}
		if len(rl.m.networks) > 0 {
			nets := make([]string, len(rl.m.networks))
			for i, n := range rl.m.networks {
				nets[i] = n.String()
			}
			switch {
			case !in.addr.IsValid() && rl.verdict == Deny:
				out = append(out, Trace{Rule: rl.name, Why: prefix + "deny rule for network " + list(nets) + " waits for the destination address"})
				continue
			case !in.addr.IsValid():
				return append(out, Trace{Rule: rl.name, Matched: true, Why: prefix + "matches if the destination address is in " + list(nets)})
			case !containsAddr(rl.m.networks, in.addr):
				out = append(out, Trace{Rule: rl.name, Why: prefix + "destination " + in.addr.String() + " not in " + list(nets)})
				continue
			}
		}
		why := prefix + "matches: " + rl.verdict.String()
		if c := rl.m.conditions(in); c != "" {
			why += " (" + c + ")"
		}
		if !rl.rate.IsZero() {
			why += fmt.Sprintf(", at most %s per subject (past it 429 with Retry-After)", rl.rate)
		}
		return append(out, Trace{Rule: rl.name, Matched: true, Why: why})
	}
	return out
}
