// Package config reads the owner's configuration: org.toml at the yard root
// and imps/<imp>/imp.toml for each imp. Reading is strict: an unknown key or
// a bad value is an error that names the file, the line and the key, and a
// configuration that does not load is an error for every caller, so the
// spine denies every action until it is fixed (fail closed).
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/rate"
	"github.com/impyard/impyard/lib/yard"
)

// Trust levels.
const (
	Gate = "gate"
	Auto = "auto"
	Deny = "deny"
)

// Executor kinds. message-user and egress-grant carry the names of the
// intents they perform.
const (
	HTTP        = "http"
	MessageUser = intent.MessageUser
	GitPush     = "git-push"
	EgressGrant = intent.EgressGrant
	// Memory appends an approved entry to the imp's memory.md.
	Memory = "memory"
	// TrustPromote is built in: it needs no [executors] entry and none
	// may be configured.
	TrustPromote = intent.TrustPromote
)

// DefaultListen is where impgw serves and impexec sends.
const DefaultListen = "127.0.0.1:7300"

// Org is org.toml.
type Org struct {
	Gateway struct {
		Listen string `toml:"listen"`
		// Wait is how long an auto-approved action waits for its execution.
		Wait Duration `toml:"wait"`
		// HeaderTimeout bounds the time from accept to a request's head.
		HeaderTimeout Duration `toml:"header_timeout"`
		// BodyBudget bounds the request body bytes held at once.
		BodyBudget int64 `toml:"body_budget"`
		// NotesPerRun and NoteBytesPerRun bound a run's journal notes.
		NotesPerRun     int   `toml:"notes_per_run"`
		NoteBytesPerRun int64 `toml:"note_bytes_per_run"`
	} `toml:"gateway"`
	Containerd struct {
		Address   string `toml:"address"`
		Namespace string `toml:"namespace"`
	} `toml:"containerd"`
	Supervisor struct {
		Concurrency int `toml:"concurrency"`
		// Runtime is the OCI runtime of every imp whose imp.toml names
		// none: runc (the default), crun or runsc.
		Runtime string `toml:"runtime"`
	} `toml:"supervisor"`
	Imps      map[string]ImpEntry  `toml:"imps"`
	Trust     []Trust              `toml:"trust"`
	Executors map[string]*Executor `toml:"executors"`
	Budget    map[string]Budget    `toml:"budget"`
	Prices    map[string]Price     `toml:"prices"`
	Inbound   Inbound              `toml:"inbound"`
	Notify    Notify               `toml:"notify"`
	Desk      Desk                 `toml:"desk"`
	// Earn opts (imp, intent) pairs into earned trust promotion (lib/earn).
	Earn []Earn `toml:"earn"`
	// MCP are the stdio MCP servers the gateway serves to boxes.
	MCP map[string]*MCPServer `toml:"mcp"`

	path string
}

// Earn is one [[earn]] entry: after After consecutive gates of Intent
// proposed by Imp and approved by the owner and executed, with no deny
// between them, a trust-promote gate proposes the narrowest auto entry
// covering their payloads.
type Earn struct {
	Intent string `toml:"intent"`
	Imp    string `toml:"imp"`
	After  int    `toml:"after"`
}

// EarnFor returns the [[earn]] entry of (imp, intent), or nil.
func (o *Org) EarnFor(imp, intent string) *Earn {
	for i := range o.Earn {
		if o.Earn[i].Imp == imp && o.Earn[i].Intent == intent {
			return &o.Earn[i]
		}
	}
	return nil
}

// ImpEntry is an imp's entry in org.toml.
type ImpEntry struct {
	Description string `toml:"description"`
}

// Trust is one [[trust]] entry: for intent (and imp, when set), a payload
// that matches every glob in Match gets Level. Free lists the fields an
// auto entry lets through with any value; see lib/trust.
type Trust struct {
	Intent string            `toml:"intent"`
	Imp    string            `toml:"imp"`
	Match  map[string]string `toml:"match"`
	Free   []string          `toml:"free"`
	Level  string            `toml:"level"`
	// Earned marks an entry impyard appended on the owner's approval of a
	// trust-promote gate; Gates are the approved gates it rests on. The
	// ladder consults earned entries after every hand-written one, and a
	// deny that disagrees with one removes it (lib/earn).
	Earned bool     `toml:"earned"`
	Gates  []string `toml:"gates"`
	// Rate bounds an auto entry's approvals per imp ("10/1h"): past it
	// a proposal the entry would approve is gated for a human instead,
	// counted from the gates it approved (lib/gate), so a restart does
	// not reset it. The zero value bounds nothing.
	Rate rate.Limit `toml:"rate"`

	// Where names the entry for decisions and errors: file and index.
	Where string `toml:"-"`
}

// What a message-user executor's command reads on its standard input.
const (
	StdinText = "text" // the message's text, a newline after it
	StdinJSON = "json" // the gate, as one JSON object
)

// Executor is [executors.<intent>].
type Executor struct {
	Kind       string            `toml:"kind"`
	Method     string            `toml:"method"`
	URL        string            `toml:"url"`
	Headers    map[string]string `toml:"headers"`
	Template   string            `toml:"template"`
	Idempotent bool              `toml:"idempotent"`
	Cost       float64           `toml:"cost"`
	Retries    int               `toml:"retries"`
	Timeout    Duration          `toml:"timeout"`
	Command    []string          `toml:"command"`
	// Stdin is what a message-user executor's command reads: "text" (the
	// default, the message's text) or "json" (the whole gate).
	Stdin string `toml:"stdin"`
	Log   string `toml:"log"`
	// Then, on a git-push executor, names the intent of a gate to file
	// after a successful push (open-pr).
	Then string `toml:"then"`
	// Fields types the payload: field name -> lib/payload type name.
	Fields map[string]string `toml:"fields"`
	// Expires is how long a gate for the intent waits for a decision
	// before it becomes expired: a Friday's action is not sent on
	// Monday. 0: it waits for ever.
	Expires Duration `toml:"expires"`
	// ConfirmAfter is the age past which approving a gate asks again
	// (impgate approve --old); 0: never.
	ConfirmAfter Duration `toml:"confirm_after"`
	// Dedupe is how long after a gate of this intent is decided an
	// identical proposal of the same imp is answered with it rather than
	// filed again; nil is DefaultDedupe, "0" turns it off (see
	// DedupeWindow).
	Dedupe *Duration `toml:"dedupe"`
}

// DefaultDedupe is an executor's dedupe when org.toml sets none.
const DefaultDedupe = time.Hour

// DedupeWindow is e's dedupe: DefaultDedupe unless set, 0 when off.
func (e *Executor) DedupeWindow() time.Duration {
	if e == nil || e.Dedupe == nil {
		return DefaultDedupe
	}
	return e.Dedupe.Duration
}

// Budget is [budget.<imp>]: what its proactive work may spend per UTC day.
type Budget struct {
	Daily float64 `toml:"daily"`
	// Bytes caps the bytes its proactive work moves through the gateway per
	// day; 0 means no cap.
	Bytes int64 `toml:"bytes"`
	// TokensDaily caps the model tokens, input plus output, its proactive
	// work uses per day; 0 means no cap.
	TokensDaily int64 `toml:"tokens_daily"`
	// ReserveTokens is the output a proactive model call is reserved
	// for when its request names no max_tokens (or max_output_tokens,
	// max_completion_tokens); 0 reserves its input alone.
	ReserveTokens int64 `toml:"reserve_tokens"`
	// Inflight caps the proactive model calls of the imp forwarded at
	// once; 0 means DefaultInflight.
	Inflight int `toml:"inflight"`
	// GatesPerRun and GateBytesPerRun cap the gates one run files and
	// their payload bytes, owner and proactive runs alike; 0 means
	// DefaultGatesPerRun and DefaultGateBytesPerRun.
	GatesPerRun     int   `toml:"gates_per_run"`
	GateBytesPerRun int64 `toml:"gate_bytes_per_run"`
	// Warn is the share of a cap (daily, bytes, tokens_daily) past which
	// the owner hears a budget-warning, once per UTC day; 0: never.
	Warn float64 `toml:"warn"`
}

// Defaults of [budget.<imp>]'s bounds, which hold for every imp, with a
// budget section or not.
const (
	DefaultInflight        = 4
	DefaultGatesPerRun     = 20
	DefaultGateBytesPerRun = 4 << 20
)

// Bounds is the imp's [budget.<imp>] with its defaults filled in.
func (o *Org) Bounds(imp string) Budget {
	b := o.Budget[imp]
	if b.Inflight == 0 {
		b.Inflight = DefaultInflight
	}
	if b.GatesPerRun == 0 {
		b.GatesPerRun = DefaultGatesPerRun
	}
	if b.GateBytesPerRun == 0 {
		b.GateBytesPerRun = DefaultGateBytesPerRun
	}
	return b
}

// Capped says whether b caps a day's spend at all.
func (b Budget) Capped() bool { return b.Daily > 0 || b.Bytes > 0 || b.TokensDaily > 0 }

// Price is [prices."<model>"]: what a million tokens of the model cost,
// in the unit of the budgets' daily.
type Price struct {
	Input  float64 `toml:"input"`
	Output float64 `toml:"output"`
}

// Priced reports whether a call to model may cost something: the model
// has a price, or no model is named while some model has one.
func (o *Org) Priced(model string) bool {
	if model == "" {
		return len(o.Prices) > 0
	}
	_, ok := o.Prices[model]
	return ok
}

// Cost is the price of a model call's tokens; a model without a price
// costs nothing, and is still counted in tokens.
func (o *Org) Cost(model string, input, output int64) float64 {
	p := o.Prices[model]
	return (float64(input)*p.Input + float64(output)*p.Output) / 1e6
}

// Imp is imps/<imp>/imp.toml.
type Imp struct {
	Name    string   `toml:"-"`
	Dir     string   `toml:"-"`
	Rootfs  string   `toml:"rootfs"`
	Archive string   `toml:"archive"`
	Image   string   `toml:"image"`
	Command []string `toml:"command"`
	TaskVia string   `toml:"task_via"`
	User    string   `toml:"user"`
	Ceiling Duration `toml:"ceiling"`
	Memory  string   `toml:"memory"`
	// Workspace is the size of the box's writable /work (default 256M).
	Workspace string `toml:"workspace"`
	Pids      int64  `toml:"pids"`
	// Runtime is the OCI runtime of its boxes (runc, crun or runsc); ""
	// takes org.toml's [supervisor] runtime.
	Runtime string `toml:"runtime"`
	// Schedule is the [[schedule]] entries (see Schedules).
	Schedule Schedules `toml:"schedule"`
	// ScheduleTask is the text of the old single schedule's tasks.
	ScheduleTask string  `toml:"schedule_task"`
	Repo         string  `toml:"repo"`
	Remote       string  `toml:"remote"`
	Concurrency  int     `toml:"concurrency"`
	Trust        []Trust `toml:"trust"`
}

// Duration is a Go duration written as a TOML string ("30m").
type Duration struct{ time.Duration }

// UnmarshalText reads "30m", "10s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	if v < 0 {
		return errors.New("duration must not be negative")
	}
	d.Duration = v
	return nil
}

// Default is the configuration of a yard without org.toml.
func Default() *Org {
	o := &Org{}
	o.defaults()
	return o
}

// ErrUnsafe is yard.ErrUnsafe: a configuration file, or a directory above
// it, that a writer of the yard could have written (see
// yard.ReadAuthority). LoadOrg and LoadImp refuse such a file by name.
var ErrUnsafe = yard.ErrUnsafe

// LoadOrg reads org.toml, under strict modes (see yard.ReadAuthority). A
// missing file is an empty configuration.
func LoadOrg(y *yard.Yard) (*Org, error) {
	p := OrgPath(y)
	o := &Org{path: p}
	b, err := y.ReadAuthority(p)
	if errors.Is(err, os.ErrNotExist) {
		o.defaults()
		return o, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseOrg(p, b)
}

// ParseOrg reads org.toml from b as LoadOrg does; p names it in errors.
// A writer checks what it is about to write with it.
func ParseOrg(p string, b []byte) (*Org, error) {
	o := &Org{path: p}
	if err := decode(p, b, o); err != nil {
		return nil, err
	}
	for i := range o.Trust {
		o.Trust[i].Where = fmt.Sprintf("%s [[trust]] #%d", p, i+1)
	}
	if err := o.check(b); err != nil {
		return nil, err
	}
	o.defaults()
	return o, nil
}

// Path is the file the configuration came from.
func (o *Org) Path() string { return o.path }

func (o *Org) defaults() {
	if o.Gateway.Listen == "" {
		o.Gateway.Listen = DefaultListen
	}
	if o.Gateway.Wait.Duration == 0 {
		o.Gateway.Wait.Duration = 10 * time.Second
	}
	o.gatewayDefaults()
	o.inboundDefaults()
	o.mcpDefaults()
	o.Notify.defaults()
	if o.Containerd.Address == "" {
		o.Containerd.Address = "/run/containerd/containerd.sock"
	}
	if o.Containerd.Namespace == "" {
		o.Containerd.Namespace = "impyard"
	}
	if o.Supervisor.Concurrency == 0 {
		o.Supervisor.Concurrency = 2
	}
	for _, e := range o.Executors {
		if e.Kind == HTTP && e.Method == "" {
			e.Method = "POST"
		}
		if e.Timeout.Duration == 0 {
			e.Timeout.Duration = 30 * time.Second
		}
	}
}

// Intent reports whether intent is one the owner declared: a gateway
// policy rule (rules), a built-in intent, or an executor that acts on the
// trusted side without the network (message-user, git-push, egress-grant,
// memory).
// An http executor needs a rule too: its request passes the gateway.
func (o *Org) Intent(intent string, rules []string, builtin ...string) bool {
	for _, r := range append(rules, builtin...) {
		if r == intent {
			return true
		}
	}
	if _, s := o.MCPServerFor(intent); s != nil {
		return true
	}
	e := o.Executors[intent]
	return e != nil && e.Kind != HTTP
}

// ErrNoExecutor is an intent with no [executors.<intent>] in org.toml: a
// gate filed for it could be approved but never executed.
var ErrNoExecutor = errors.New("no executor is configured")

// Executor returns the executor configured for intent, or an error
// wrapping ErrNoExecutor that names the intent and org.toml.
func (o *Org) Executor(intent string) (*Executor, error) {
	if e := o.Executors[intent]; e != nil {
		return e, nil
	}
	if _, s := o.MCPServerFor(intent); s != nil {
		return MCPExecutor, nil
	}
	return nil, fmt.Errorf("%w for intent %q in %s: a gate for it could be approved but never executed (add [executors.%s])", ErrNoExecutor, intent, o.path, intent)
}

// CheckIntents refuses trust entries and http executors for intents that
// Intent does not know: a typo there would silently never apply.
func (o *Org) CheckIntents(rules []string, builtin ...string) error {
	for _, t := range o.Trust {
		if !o.Intent(t.Intent, rules, builtin...) {
			return fmt.Errorf("%s: intent %q names no rule in the gateway policy and no trusted-side executor", t.Where, t.Intent)
		}
	}
	for i, e := range o.Earn {
		if !o.Intent(e.Intent, rules, builtin...) {
			return fmt.Errorf("%s [[earn]] #%d: intent %q names no rule in the gateway policy and no trusted-side executor", o.path, i+1, e.Intent)
		}
	}
	for intent, e := range o.Executors {
		if e.Kind == HTTP && !o.Intent(intent, rules, builtin...) {
			return fmt.Errorf("%s: [executors.%s] is an http executor but no gateway policy rule is named %q", o.path, intent, intent)
		}
	}
	return nil
}

// ErrNoImpConfig is LoadImp's error for an imp whose imp.toml does not
// exist, as opposed to one that does not load.
var ErrNoImpConfig = errors.New("has no configuration")

// LoadImp reads imps/<name>/imp.toml, under strict modes (see
// yard.ReadAuthority). A missing file is an error wrapping
// ErrNoImpConfig: an imp without configuration cannot run.
func LoadImp(y *yard.Yard, name string) (*Imp, error) {
	if err := id.CheckName(name); err != nil {
		return nil, err
	}
	p := ImpPath(y, name)
	b, err := y.ReadAuthority(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("imp %s %w: %s does not exist", name, ErrNoImpConfig, p)
	}
	if err != nil {
		return nil, err
	}
	return ParseImp(p, name, b)
}

// ParseImp reads the imp.toml of imp name from b as LoadImp does; path
// names it in errors and places its relative paths. A writer checks what
// it is about to write with it.
func ParseImp(p, name string, b []byte) (*Imp, error) {
	dir := filepath.Dir(p)
	im := &Imp{Name: name, Dir: dir}
	if err := decode(p, b, im); err != nil {
		return nil, err
	}
	for i := range im.Trust {
		im.Trust[i].Where = fmt.Sprintf("%s [[trust]] #%d", p, i+1)
	}
	if err := im.check(p, b); err != nil {
		return nil, err
	}
	return im, nil
}

// decode parses TOML strictly into v, naming file, line and key.
func decode(path string, b []byte, v any) error {
	md, err := toml.Decode(string(b), v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if pe.LastKey != "" {
				return fmt.Errorf("%s:%d: key %q: %s", path, pe.Position.Line, pe.LastKey, pe.Message)
			}
			return fmt.Errorf("%s:%d: %s", path, pe.Position.Line, pe.Message)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return fmt.Errorf("%s:%d: unknown key %q", path, lineOf(b, k[len(k)-1]), k.String())
	}
	return nil
}

// lineOf finds the line where key is set or its table begins, for error
// messages: BurntSushi/toml does not report positions of keys it did not
// decode.
func lineOf(b []byte, key string) int {
	quoted := regexp.QuoteMeta(key)
	re := regexp.MustCompile(`(^|[\s{,.\[])("` + quoted + `"|` + quoted + `)\s*(=|\])`)
	for i, line := range strings.Split(string(b), "\n") {
		if re.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

func bad(path string, b []byte, key, format string, a ...any) error {
	return fmt.Errorf("%s:%d: key %q: %s", path, lineOf(b, key), key, fmt.Sprintf(format, a...))
}

func (o *Org) check(b []byte) error {
	p := o.path
	if err := checkTrust(p, b, o.Trust); err != nil {
		return err
	}
	if err := o.checkEarn(b); err != nil {
		return err
	}
	for name := range o.Imps {
		if err := id.CheckName(name); err != nil {
			return bad(p, b, name, "%v", err)
		}
	}
	for name, bu := range o.Budget {
		if err := id.CheckName(name); err != nil {
			return bad(p, b, name, "%v", err)
		}
		if bu.Daily < 0 || bu.Bytes < 0 {
			return bad(p, b, "daily", "budget of %s must not be negative", name)
		}
		if bu.TokensDaily < 0 {
			return bad(p, b, "tokens_daily", "budget of %s must not be negative", name)
		}
		if bu.ReserveTokens < 0 {
			return bad(p, b, "reserve_tokens", "budget of %s must not be negative", name)
		}
		if bu.Inflight < 0 {
			return bad(p, b, "inflight", "budget of %s must be positive", name)
		}
		if bu.GatesPerRun < 0 || bu.GateBytesPerRun < 0 {
			return bad(p, b, "gates_per_run", "per-run gate caps of %s must be positive", name)
		}
		if bu.Warn < 0 || bu.Warn > 1 {
			return bad(p, b, "warn", "budget of %s: warn is a share of its caps, from 0 to 1", name)
		}
	}
	for model, pr := range o.Prices {
		if pr.Input < 0 || pr.Output < 0 {
			return bad(p, b, model, "price of %s must not be negative", model)
		}
	}
	for intent, e := range o.Executors {
		if !id.ValidIntent(intent) {
			return bad(p, b, intent, "not a valid intent name")
		}
		if e == nil {
			return bad(p, b, intent, "empty executor")
		}
		if intent == TrustPromote {
			return bad(p, b, intent, "%s is built in: impyard files and performs it, no executor is configured for it", intent)
		}
		switch e.Kind {
		case HTTP:
			if e.URL == "" {
				return bad(p, b, intent, "an http executor needs url")
			}
			if !strings.HasPrefix(e.URL, "https://") && !strings.HasPrefix(e.URL, "http://") {
				return bad(p, b, "url", "executor %s: url must be http:// or https://", intent)
			}
		case MessageUser, GitPush, EgressGrant, Memory:
		case "":
			return bad(p, b, intent, "executor %s has no kind", intent)
		default:
			return bad(p, b, "kind", "executor %s: unknown kind %q (want http, message-user, git-push, egress-grant or memory)", intent, e.Kind)
		}
		if e.Then != "" {
			if e.Kind != GitPush {
				return bad(p, b, "then", "executor %s: then is only for git-push executors", intent)
			}
			if o.Executors[e.Then] == nil || e.Then == intent {
				return bad(p, b, "then", "executor %s: then = %q names no other configured executor", intent, e.Then)
			}
		}
		if e.Cost < 0 || e.Retries < 0 {
			return bad(p, b, intent, "executor %s: cost and retries must not be negative", intent)
		}
		switch {
		case e.Stdin != "" && e.Kind != MessageUser:
			return bad(p, b, "stdin", "executor %s: stdin is only for message-user executors", intent)
		case e.Stdin != "" && e.Stdin != StdinText && e.Stdin != StdinJSON:
			return bad(p, b, "stdin", "executor %s: stdin = %q, want %q or %q", intent, e.Stdin, StdinText, StdinJSON)
		}
	}
	if o.Supervisor.Concurrency < 0 {
		return bad(p, b, "concurrency", "must not be negative")
	}
	if err := checkRuntime(p, b, o.Supervisor.Runtime); err != nil {
		return err
	}
	if err := o.checkFields(b); err != nil {
		return err
	}
	if err := o.checkInbound(p, b); err != nil {
		return err
	}
	if err := o.checkMCP(p, b); err != nil {
		return err
	}
	if err := o.Notify.check(p, b); err != nil {
		return err
	}
	if err := o.checkDesk(p, b); err != nil {
		return err
	}
	return o.checkGateway(p, b)
}

func checkTrust(p string, b []byte, ts []Trust) error {
	for i, t := range ts {
		if !id.ValidIntent(t.Intent) {
			return bad(p, b, "intent", "[[trust]] #%d: invalid or missing intent %q", i+1, t.Intent)
		}
		if t.Imp != "" {
			if err := id.CheckName(t.Imp); err != nil {
				return bad(p, b, "imp", "[[trust]] #%d: %v", i+1, err)
			}
		}
		switch t.Level {
		case Gate, Auto, Deny:
		default:
			return bad(p, b, "level", "[[trust]] #%d: level %q is not gate, auto or deny", i+1, t.Level)
		}
		if err := checkFree(p, b, i, t); err != nil {
			return err
		}
		for field, g := range t.Match {
			if _, err := compileGlob(g); err != nil {
				return bad(p, b, field, "[[trust]] #%d: bad glob %q: %v", i+1, g, err)
			}
		}
		if !t.Rate.IsZero() && t.Level != Auto {
			return bad(p, b, "rate", "[[trust]] #%d: rate bounds auto-approvals; a %s entry approves nothing", i+1, t.Level)
		}
		if t.Earned && t.Level != Auto {
			return bad(p, b, "earned", "[[trust]] #%d: an earned entry is level auto, not %q", i+1, t.Level)
		}
		if len(t.Gates) > 0 && !t.Earned {
			return bad(p, b, "gates", "[[trust]] #%d: gates is only for earned entries (earned = true)", i+1)
		}
		for _, g := range t.Gates {
			if err := id.Check(id.Gate, g); err != nil {
				return bad(p, b, "gates", "[[trust]] #%d: %v", i+1, err)
			}
		}
	}
	return nil
}

// checkEarn checks the [[earn]] entries that can be checked without the
// executors: names, a positive count, one entry per (imp, intent).
func (o *Org) checkEarn(b []byte) error {
	p := o.path
	seen := map[[2]string]bool{}
	for i, e := range o.Earn {
		if !id.ValidIntent(e.Intent) || e.Intent == TrustPromote {
			return bad(p, b, "intent", "[[earn]] #%d: invalid or missing intent %q", i+1, e.Intent)
		}
		if err := id.CheckName(e.Imp); err != nil {
			return bad(p, b, "imp", "[[earn]] #%d: earned trust is per imp: %v", i+1, err)
		}
		if e.After < 1 {
			return bad(p, b, "after", "[[earn]] #%d: after must be at least 1, not %d", i+1, e.After)
		}
		// Grants and memory change what the yard itself allows or tells
		// every later box: only the owner writes trust for them.
		if x := o.Executors[e.Intent]; e.Intent == EgressGrant || x != nil && (x.Kind == EgressGrant || x.Kind == Memory) {
			return bad(p, b, "intent", "[[earn]] #%d: trust for %s (egress grants, memory) is never earned; write a [[trust]] entry if you want one", i+1, e.Intent)
		}
		k := [2]string{e.Imp, e.Intent}
		if seen[k] {
			return bad(p, b, "earn", "[[earn]] #%d: a second entry for imp %s, intent %s", i+1, e.Imp, e.Intent)
		}
		seen[k] = true
	}
	return nil
}

func (im *Imp) check(p string, b []byte) error {
	n := 0
	for _, s := range []string{im.Rootfs, im.Archive, im.Image} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%s: set exactly one of rootfs, archive or image", p)
	}
	switch im.TaskVia {
	case "", "arg", "stdin":
	default:
		return bad(p, b, "task_via", "want arg or stdin, not %q", im.TaskVia)
	}
	if im.Pids < 0 || im.Concurrency < 0 {
		return fmt.Errorf("%s: pids and concurrency must not be negative", p)
	}
	if err := checkRuntime(p, b, im.Runtime); err != nil {
		return err
	}
	for _, t := range im.Trust {
		if t.Imp != "" && t.Imp != im.Name {
			return bad(p, b, "imp", "a trust entry in %s's imp.toml cannot name imp %q", im.Name, t.Imp)
		}
	}
	if err := checkTrust(p, b, im.Trust); err != nil {
		return err
	}
	for _, f := range []*string{&im.Rootfs, &im.Archive, &im.Repo} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(im.Dir, *f)
		}
	}
	return im.checkSchedules(p, b)
}

// Runtimes are the OCI runtimes a box can run under (lib/box runs them),
// the default first.
var Runtimes = []string{"runc", "crun", "runsc"}

func checkRuntime(p string, b []byte, rt string) error {
	if rt == "" || slices.Contains(Runtimes, rt) {
		return nil
	}
	return bad(p, b, "runtime", "unknown runtime %q (want %s)", rt, strings.Join(Runtimes, ", "))
}

// RuntimeOf is the runtime of im's boxes: its own, else the org's, else
// runc.
func (o *Org) RuntimeOf(im *Imp) string {
	switch {
	case im.Runtime != "":
		return im.Runtime
	case o.Supervisor.Runtime != "":
		return o.Supervisor.Runtime
	}
	return Runtimes[0]
}

func compileGlob(g string) (*glob.Pattern, error) { return glob.Compile(g) }
