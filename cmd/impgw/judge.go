package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const judgeUsage = `usage: impgw judge [--policy FILE] [--explain] [--json] [--task ID] [--at TIME] METHOD URL [-H 'name: value']... [--body-file FILE]

Dry-run one request against a policy (default policies/gateway.json in the
yard) and print the verdict, the deciding rule and the reason. The request
is built exactly as the gateway builds it: the host canonicalised, MCP
calls lifted from the body, credential placeholders found. URL is an http
or https URL, or host:port with METHOD CONNECT. No DNS lookup is made: a
rule with a network, and the check that refuses loopback and private
destinations, need the address the gateway would dial; give it with
--addr. A rule with expires is judged at the current time, or at --at; a
rule with a task holds only for the task named with --task.

Exit status: 0 allow or tunnel, 1 deny (or the policy cannot be read),
2 usage.

Examples:
  impgw judge GET https://chatgpt.com/backend-api/codex/responses
  impgw judge --explain POST https://api.githubcopilot.com/mcp -H 'content-type: application/json' --body-file call.json
  impgw judge --addr 127.0.0.1 GET http://localhost:8080/
  impgw judge CONNECT pinned.example.com:443
  impgw judge --explain --subject yuko --task t-20260301-ab12 GET 'https://api.example.com/search?q=cats'
`

// judgeCmd returns the exit status for its verdict; with an error, the
// error decides the status instead.
func judgeCmd(e *cli.Env, args []string) (int, error) {
	fs := e.FlagSet("judge", judgeUsage)
	root := cli.RootFlag(fs)
	policy := fs.String("policy", "", "the policy `FILE` ('-' for standard input; default policies/gateway.json in the yard)")
	var headers listValue
	fs.Var(&headers, "H", "a request header, `'name: value'` (repeatable)")
	bodyFile := fs.String("body-file", "", "read the request body from `FILE` ('-' for stdin)")
	explain := fs.Bool("explain", false, "say why each rule before the deciding one did not match")
	addrText := fs.String("addr", "", "judge as if the host resolved to `IP`")
	subject := fs.String("subject", "", "the requesting `SUBJECT` (an imp name, or org)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	task := fs.String("task", "", "the `ID` of the task the request is made for")
	e.Complete(fs, "task", cli.Names(complete.Task))
	at := fs.String("at", "", "judge as at `TIME` (RFC 3339; default now), for rules that expire")
	if err := cli.Parse(fs, args); err != nil {
		return 0, err
	}
	when := time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return 0, cli.Usagef("judge: --at %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", *at)
		}
		when = t
	}
	pos := fs.Args()
	if len(pos) != 2 {
		return 0, cli.Usagef("judge: want METHOD and URL")
	}
	h := make(http.Header)
	for _, kv := range headers {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return 0, cli.Usagef("judge: -H %q is not 'name: value'", kv)
		}
		key := textproto.CanonicalMIMEHeaderKey(k)
		h[key] = append(h[key], strings.TrimSpace(v))
	}
	if err := cli.OneStdin(map[string]string{"--policy": *policy, "--body-file": *bodyFile}); err != nil {
		return 0, err
	}
	var body []byte
	if *bodyFile != "" {
		var err error
		if body, err = e.ReadInput(*bodyFile, store.MaxFile); err != nil {
			return 0, err
		}
	}
	var addr netip.Addr
	if *addrText != "" {
		a, err := netip.ParseAddr(*addrText)
		if err != nil {
			return 0, cli.Usagef("judge: --addr %q is not an IP address", *addrText)
		}
		addr = a.Unmap()
	}
	p, err := loadPolicy(e, *root, *policy)
	if err != nil {
		return 0, err
	}
	out := judgeOutput{}
	jr, err := gateway.NewRequest(pos[0], pos[1], h, body, *subject)
	if err != nil {
		out.Verdict, out.Reason = gateway.VerdictReject, "the gateway refuses it before judging: "+err.Error()
		return cli.Fail, out.print(e, *asJSON)
	}
	jr.Addr, jr.Task, jr.Time = addr, *task, when
	d := gateway.Decide(p, jr)
	out = judgeOutput{Verdict: d.Verdict.String(), Rule: d.Rule, Reason: d.Reason, WouldDeny: d.WouldDeny, NeedsAddr: d.NeedsAddr}
	for _, r := range d.Rated {
		out.Rates = append(out.Rates, rateStep{Rule: r.Rule, Rate: r.Rate.String()})
	}
	if *explain {
		for _, tr := range p.Explain(jr) {
			out.Explain = append(out.Explain, explainStep{Rule: tr.Rule, Matched: tr.Matched, Why: tr.Why})
		}
	}
	if err := out.print(e, *asJSON); err != nil {
		return 0, err
	}
	if d.Verdict == judge.Deny {
		return cli.Fail, nil
	}
	return cli.OK, nil
}

type explainStep struct {
	Rule    string `json:"rule"`
	Matched bool   `json:"matched"`
	Why     string `json:"why"`
}

type judgeOutput struct {
	Verdict   string        `json:"verdict"`
	Rule      string        `json:"rule"`
	Reason    string        `json:"reason"`
	WouldDeny bool          `json:"would_deny,omitempty"`
	NeedsAddr bool          `json:"needs_addr,omitempty"`
	Explain   []explainStep `json:"explain,omitempty"`
	// Rates are the rates the request is counted against per subject:
	// the one judgement cannot say whether the gateway's count is spent.
	Rates []rateStep `json:"rates,omitempty"`
}

type rateStep struct {
	Rule string `json:"rule"`
	Rate string `json:"rate"`
}

func (o *judgeOutput) print(e *cli.Env, asJSON bool) error {
	if asJSON {
		return cli.JSONLine(e.Stdout, o)
	}
	w := e.Stdout
	for _, s := range o.Explain {
		mark := "no "
		if s.Matched {
			mark = "yes"
		}
		name := s.Rule
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(w, "  %s  %-24s %s\n", mark, name, s.Why)
	}
	rule := o.Rule
	if rule == "" {
		rule = "-"
	}
	fmt.Fprintf(w, "verdict  %s\nrule     %s\nreason   %s\n", o.Verdict, rule, o.Reason)
	if o.WouldDeny {
		fmt.Fprintln(w, "note     report mode: allowed, but an enforcing policy would deny it")
	}
	for _, r := range o.Rates {
		fmt.Fprintf(w, "rate     %s per subject (rule %s); past it the gateway answers 429\n", r.Rate, r.Rule)
	}
	if o.NeedsAddr {
		fmt.Fprintln(w, "note     the gateway judges the resolved address too (loopback and private ones need a rule's network); try --addr")
	}
	return nil
}

// loadPolicy reads a policy strictly: an invalid one is an error here,
// where the gateway would deny everything. "-" reads it from standard
// input.
func loadPolicy(e *cli.Env, root, path string) (*judge.Policy, error) {
	var data []byte
	var err error
	switch path {
	case "":
		y, yerr := yard.Open(root)
		if yerr != nil {
			return nil, yerr
		}
		path = y.PolicyPath()
		data, err = store.ReadFile(path)
	case cli.Stdin:
		path = "standard input"
		data, err = e.ReadInput(cli.Stdin, store.MaxFile)
	default:
		data, err = store.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	p, err := judge.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
