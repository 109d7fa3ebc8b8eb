package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/impyard/impyard/lib/judge"
)

// NewRequest describes a request to the judge exactly as the gateway
// would see it: method and an absolute http or https URL (for CONNECT, a
// host:port), the client's headers and body, decoded as the gateway
// decodes a Content-Encoding. It is how impgw judge dry-runs
// a request. An error is what the gateway would refuse before judging.
func NewRequest(method, rawURL string, h http.Header, body []byte, subject string) (*judge.Request, error) {
	if h == nil {
		h = make(http.Header)
	}
	if strings.EqualFold(method, http.MethodConnect) {
		host, port, err := parseAuthority(rawURL, 0)
		if err != nil {
			return nil, err
		}
		return &judge.Request{Subject: subject, Protocol: "https", Method: http.MethodConnect, Host: host, Port: port, Header: h}, nil
	}
	t, err := parseAbsolute(rawURL)
	if err != nil {
		return nil, err
	}
	plain, err := decode(h.Get("Content-Encoding"), body, DefaultLimits().MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	return newJudgeRequest(&t, method, h, plain, subject), nil
}

// Decide judges jr as the gateway does: a CONNECT by what it shows, any
// other request in full, with jr.Addr as the resolved address when set.
func Decide(p *judge.Policy, jr *judge.Request) judge.Decision {
	if jr.Method == http.MethodConnect {
		return p.JudgeConnectAddr(jr.Host, jr.Port, jr.Subject, jr.Addr)
	}
	return p.Judge(jr)
}

// JudgeRequest rebuilds the judged request a record describes, for
// re-judging under another policy. It reports false for records whose
// outcome no policy decides: rejects and the gateway's own refusals.
// Redacted header and query values stay redacted, so a rule on their content cannot
// be replayed faithfully; a redacted query value counts as present. The
// request is judged at the record's time, and a rule reading the body or
// the task, which records do not hold, leaves the Decision Unknown.
func (r *Record) JudgeRequest() (*judge.Request, bool) {
	if r.Verdict == VerdictReject || r.RefusedBy != "" || r.Request.Host == "" {
		return nil, false
	}
	q := &r.Request
	h := make(http.Header, len(q.Headers))
	for k, v := range q.Headers {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	jr := &judge.Request{
		Subject:      q.Imp,
		Protocol:     q.Protocol,
		Method:       q.Method,
		Host:         q.Host,
		Port:         q.Port,
		Path:         q.Path,
		Query:        q.Query,
		Header:       h,
		BodySize:     q.BodySize,
		MCP:          q.MCP,
		MCPError:     q.MCPError,
		Placeholders: q.Placeholders,
		Time:         r.Time,
		FromRecord:   true,
	}
	if ap, err := netip.ParseAddrPort(r.Addr); err == nil {
		jr.Addr = ap.Addr()
	}
	return jr, true
}

// URL is the recorded request's target as one string: host:port for a
// CONNECT, else the URL, with the port only when it is not the default.
func (r *Record) URL() string {
	q := &r.Request
	t := target{protocol: q.Protocol, host: q.Host, port: q.Port, path: q.Path, query: q.Query}
	if q.Method == http.MethodConnect {
		return net.JoinHostPort(q.Host, strconv.Itoa(q.Port))
	}
	return t.url()
}
