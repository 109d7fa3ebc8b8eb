package deskd

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/state"
)

//go:embed static/desk.js static/desk.css
var staticFiles embed.FS

// pageData is what every page template reads. Every string in it that a
// box or a yard writer chose has been through cli.Printable (control
// and bidi characters shown as escapes) and is escaped again by
// html/template as text.
type pageData struct {
	Title    string
	Signed   string // the passkey signed in, or ""
	Error    string
	Rows     []listed
	Problems []string
	Name     string // enroll: the passkey's name
	Token    string // enroll
	Gate     *gateView
}

// gateView is a gate as impgate show prints it, field by field.
type gateView struct {
	ID, Imp, Intent, State, Waiting, Task, Run string
	Where, Trust, SHA256, Rationale            string
	Matches                                    bool
	MatchError                                 string
	Verifies                                   *bool
	ApprovalLine, ApprovalError                string
	Payload                                    string
	PayloadBytes                               int
	DiffName, Stat                             string
	Diff                                       []diffLine
	DiffError                                  string
	Promotion                                  []string
	Result                                     string
	Timeline                                   []string
	CanApprove, CanDeny                        bool

	// Subject names the gate shown, whole (approval.Subject.Digest): the
	// approval is asked for it alone.
	Subject string
	// Filed is when and how long ago it was filed, Left the time it has
	// before its deadline ("" without one), Old that it is older than its
	// executor's confirm_after, so approving asks again.
	Filed, Left string
	Old         bool
}

type diffLine struct{ Class, Text string }

func (s *Server) gateView(r *desk.Report, ss *session) pageData {
	g := r.Gate
	p := cli.Printable
	v := &gateView{ID: g.ID, Imp: p(g.Imp), Intent: p(g.Intent), State: g.State, Waiting: p(r.Waiting),
		Task: p(g.Task), Run: p(g.Run), Trust: p(r.Verdict), SHA256: p(g.SHA256), Rationale: p(g.Rationale),
		Subject: g.Subject().Digest(),
		Filed:   g.Created.UTC().Format(time.RFC3339),
		Matches: r.PayloadMatches, MatchError: p(r.PayloadError), Verifies: r.Verifies, ApprovalError: p(r.Error)}
	// The desk's clock, not the report's, which every page shares.
	t := desk.Timing(g, s.org(), s.cfg.Now())
	v.Filed = t.AgeText() + " ago, at " + v.Filed
	if t.Deadline != nil && g.State == state.Filed {
		v.Left = t.LeftText() + ", at " + t.Deadline.UTC().Format(time.RFC3339)
	}
	v.Old = t.Old
	if r.Destination != nil {
		v.Where = p(r.Destination.String())
	} else {
		v.Where = "UNKNOWN: " + p(r.DestinationError)
	}
	if r.Verifies != nil && *r.Verifies {
		v.ApprovalLine = "verifies: signed by " + r.Key + " for " + p(g.Approval.By) + " at " + g.Approval.At.Format(time.RFC3339)
	}
	if r.PayloadMatches {
		if frozen, err := g.Frozen(); err == nil {
			var pretty bytes.Buffer
			if json.Indent(&pretty, frozen, "", "  ") == nil {
				v.Payload = cli.PrintableLines(pretty.String())
			}
			v.PayloadBytes = len(frozen)
			d, err := desk.DiffOf(s.cfg.Yard, frozen)
			switch {
			case err != nil:
				v.DiffError = p(err.Error())
			case d != nil:
				v.DiffName, v.Stat = d.Name, cli.PrintableLines(d.Stat)
				for _, line := range strings.Split(strings.TrimSuffix(string(d.Text), "\n"), "\n") {
					class := ""
					switch {
					case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
						class = "file"
					case strings.HasPrefix(line, "+"):
						class = "add"
					case strings.HasPrefix(line, "-"):
						class = "del"
					case strings.HasPrefix(line, "@@"):
						class = "hunk"
					}
					v.Diff = append(v.Diff, diffLine{Class: class, Text: p(line)})
				}
			}
		}
	}
	if pr := r.Promotion; pr != nil {
		if pr.Error != "" {
			v.Promotion = append(v.Promotion, "proposed entry: UNREADABLE: "+p(pr.Error))
		} else {
			v.Promotion = append(v.Promotion, "proposed entry (appended to imp.toml on approval):\n"+cli.PrintableLines(pr.TOML))
			for _, wide := range pr.Wide {
				v.Promotion = append(v.Promotion, "WIDER than the approvals it rests on: "+p(wide))
			}
			if pr.NotDerived != "" {
				v.Promotion = append(v.Promotion, "NOT WHAT THE APPROVALS DERIVE (impexec will append nothing): "+p(pr.NotDerived))
			}
			for _, rg := range pr.Gates {
				v.Promotion = append(v.Promotion, "rests on "+rg.ID+" "+rg.State+" by "+p(rg.By)+" "+p(string(rg.Payload)))
			}
		}
	}
	if len(g.Result) > 0 {
		v.Result = cli.PrintableLines(string(g.Result))
	}
	for _, h := range g.History {
		v.Timeline = append(v.Timeline, cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
	}
	v.CanApprove = g.State == state.Filed && r.PayloadMatches
	v.CanDeny = g.State == state.Filed
	return pageData{Title: "Gate " + g.ID, Signed: ss.name, Gate: v}
}

func age(now, t time.Time) string { return cli.Age(now, t) }

// pages are parsed at the first page served, not at package init, which
// every impgate command (impgate approve among them) would pay for.
var pages = sync.OnceValue(func() *template.Template { return template.Must(template.New("").Parse(pageText)) })

const pageText = `
{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · impyard desk</title>
<link rel="stylesheet" href="/static/desk.css">
<script src="/static/desk.js" defer></script>
</head><body>
<header><a href="/">impyard desk</a>{{if .Signed}} <span class="who">{{.Signed}}</span>
<form method="post" action="/logout" class="inline"><button type="submit">Sign out</button></form>{{end}}</header>
<main>
<h1>{{.Title}}</h1>
<p id="status" role="status"></p>
{{end}}
{{define "foot"}}</main></body></html>{{end}}

{{define "login"}}{{template "head" .}}
<p>Sign in with a passkey enrolled for this desk.</p>
<button id="login" type="button">Sign in with passkey</button>
{{template "foot" .}}{{end}}

{{define "enroll"}}{{template "head" .}}
<p>This link registers a passkey called <b>{{.Name}}</b> that can sign in to this desk and approve gates.
It works once.</p>
<button id="enroll" type="button" data-token="{{.Token}}">Create passkey</button>
{{template "foot" .}}{{end}}

{{define "error"}}{{template "head" .}}
<p class="bad">{{.Error}}</p>
{{template "foot" .}}{{end}}

{{define "list"}}{{template "head" .}}
{{range .Problems}}<p class="bad">{{.}}</p>{{end}}
{{if not .Rows}}<p>No gate is waiting.</p>{{end}}
<ul class="gates">
{{range .Rows}}<li><a href="/g/{{.ID}}"><span class="intent">{{.Intent}}</span> <span class="imp">{{.Imp}}</span>
<span class="age">{{.Age}}</span><span class="where">{{.Where}}</span><span class="id">{{.ID}}</span></a></li>
{{end}}</ul>
{{template "foot" .}}{{end}}

{{define "gate"}}{{template "head" .}}{{with .Gate}}
<dl class="facts">
<dt>gate</dt><dd class="id">{{.ID}}</dd>
<dt>imp</dt><dd>{{.Imp}}</dd>
<dt>intent</dt><dd>{{.Intent}}</dd>
<dt>state</dt><dd class="state-{{.State}}">{{.State}}</dd>
<dt>filed</dt><dd id="filed">{{.Filed}}</dd>
{{if .Left}}<dt>time left</dt><dd id="left">{{.Left}}</dd>{{end}}
{{if .Waiting}}<dt>waiting</dt><dd>{{.Waiting}}</dd>{{end}}
{{if .Task}}<dt>task</dt><dd>{{.Task}}</dd>{{end}}
{{if .Run}}<dt>run</dt><dd>{{.Run}}</dd>{{end}}
<dt>goes to</dt><dd id="where">{{.Where}}</dd>
<dt>trust</dt><dd>{{.Trust}}</dd>
<dt>sha256</dt><dd class="sha">{{.SHA256}} {{if .Matches}}(the payload matches){{else}}<b class="bad" id="edited">EDITED</b>: DOES NOT MATCH the payload (edited after filing?){{end}}</dd>
{{if .Verifies}}<dt>approval</dt><dd id="approval">{{if .ApprovalLine}}{{.ApprovalLine}}{{else}}<b class="bad">DOES NOT VERIFY</b>: {{.ApprovalError}}{{end}}</dd>{{end}}
{{if .Rationale}}<dt>rationale</dt><dd>{{.Rationale}}</dd>{{end}}
</dl>
{{if .Matches}}<h2>payload ({{.PayloadBytes}} bytes)</h2>
<pre id="payload">{{.Payload}}</pre>
{{else}}<p class="bad">payload not shown: it is not what was filed ({{.MatchError}}), and it can never be approved or executed.</p>{{end}}
{{if .DiffError}}<p class="bad">diff: {{.DiffError}}</p>{{end}}
{{if .DiffName}}<h2>stat</h2><pre>{{.Stat}}</pre>
<h2>diff ({{.DiffName}})</h2><pre class="diff">{{range .Diff}}<span class="{{.Class}}">{{.Text}}</span>
{{end}}</pre>{{end}}
{{range .Promotion}}<pre class="promotion">{{.}}</pre>{{end}}
{{if .Result}}<h2>result</h2><pre>{{.Result}}</pre>{{end}}
<h2>timeline</h2>
<ul class="timeline">{{range .Timeline}}<li>{{.}}</li>{{end}}</ul>
{{if .CanApprove}}<div class="decide">
{{if .Old}}<p class="bad" id="old">Filed {{.Filed}}: older than its executor's confirm_after.</p>
<label><input type="checkbox" id="old-ok"> Approve it although it is old</label>{{end}}
<button id="approve" type="button" data-gate="{{.ID}}" data-sha="{{.SHA256}}" data-subject="{{.Subject}}">Approve with passkey</button>
<p class="note">Your passkey signs this gate's id, imp, intent, task, payload sha256, you and the time.</p>
</div>{{end}}
{{if .CanDeny}}<form method="post" action="/g/{{.ID}}/deny" class="decide">
<label for="reason">Reason</label>
<textarea id="reason" name="reason" rows="2"></textarea>
<button id="deny" type="submit">Deny</button>
</form>{{end}}
{{end}}{{template "foot" .}}{{end}}
`

func (s *Server) render(w http.ResponseWriter, code int, name string, d pageData) {
	var b bytes.Buffer
	if err := pages().ExecuteTemplate(&b, name, d); err != nil {
		s.cfg.Logf("desk: page %s: %v", name, err)
		http.Error(w, "page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}
