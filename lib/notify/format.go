package notify

import (
	"encoding/json"
	"fmt"
	"github.com/impyard/impyard/lib/cli"
	"sort"
	"strconv"
	"strings"
)

// The formats a webhook body can take.
const (
	JSON    = "json"
	Discord = "discord"
	Slack   = "slack"
	Ntfy    = "ntfy"
)

// Formats are the values [notify] format may take.
var Formats = []string{JSON, Discord, Slack, Ntfy}

// Header carries the notification's id on every webhook request, in any
// format, for a receiver to drop a repeat.
const Header = "X-Impyard-Notification"

// Message is what one notification tells. A command receives it as JSON
// on standard input; a webhook, rendered in the configured format.
type Message struct {
	Schema string `json:"schema"`
	// ID is the outbox entry's id: the same on every attempt.
	ID     string `json:"id"`
	Event  string `json:"event"`
	At     string `json:"at"`
	Imp    string `json:"imp"`
	Gate   string `json:"gate,omitempty"`
	Task   string `json:"task,omitempty"`
	Intent string `json:"intent,omitempty"`
	// SHA256 is the prefix of the payload's sha256 that approves it.
	SHA256    string `json:"sha256,omitempty"`
	Rationale string `json:"rationale,omitempty"`
	// Summary is a short account of the payload, each field and the start
	// of its value; for a task, the start of its text.
	Summary string `json:"summary,omitempty"`
	// Reason is why a task failed or needs review.
	Reason string `json:"reason,omitempty"`
	// Approve is the exact command that approves the gate's payload.
	Approve string `json:"approve,omitempty"`
	// Gates, in a message Fold made, are the gates it tells of, oldest
	// first; Count is how many.
	Gates []string `json:"gates,omitempty"`
	Count int      `json:"count,omitempty"`
	// Text says it all in a few lines, for chat.
	Text string `json:"text"`
}

// Redacted replaces every value the owner keeps secret.
const Redacted = "[redacted]"

// Redact replaces every occurrence of each secret in every field of m:
// whatever reached a payload, a rationale or a reason, a notification
// never repeats a credential the deliverer knows of. Secrets shorter than
// four bytes are passed over: they would blank out ordinary words.
func (m *Message) Redact(secrets []string) {
	for _, f := range []*string{&m.Imp, &m.Gate, &m.Task, &m.Intent, &m.SHA256, &m.Rationale, &m.Summary, &m.Reason, &m.Approve, &m.Text} {
		*f = redact(*f, secrets)
	}
}

func redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// secretName is a payload field whose value a summary never shows.
func secretName(field string) bool {
	f := strings.ToLower(field)
	for _, w := range []string{"secret", "token", "password", "passwd", "key", "auth", "credential", "cookie"} {
		if strings.Contains(f, w) {
			return true
		}
	}
	return false
}

// Summarize is a one-line account of a JSON object payload within about
// limit bytes: each field, sorted, with the start of its value (a field
// named like a credential shows none, at any depth). Each value has the
// secrets replaced before it is shortened, so no prefix of one is left.
func Summarize(payload []byte, limit int, secrets []string) string {
	var obj map[string]any
	if err := json.Unmarshal(payload, &obj); err != nil {
		return fmt.Sprintf("%d bytes", len(payload))
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v := Redacted
		if !secretName(k) {
			v = short(obj[k], 40, secrets)
		}
		parts = append(parts, Excerpt(k, 40, secrets)+"="+v)
	}
	return cut(strings.Join(parts, "; "), limit)
}

// blank is v with the value of every member named like a credential, in
// it or in anything it holds, replaced by Redacted: a nested
// {"headers":{"Authorization":"Bearer ..."}} would otherwise show the
// start of the credential.
func blank(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if secretName(k) {
				out[k] = Redacted
			} else {
				out[k] = blank(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = blank(e)
		}
		return out
	}
	return v
}

func short(v any, n int, secrets []string) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []any:
		var items []string
		for _, it := range x {
			items = append(items, short(it, n, secrets))
		}
		s = strings.Join(items, ", ")
	default:
		// Unescaped, so that a secret holding & < > (a webhook URL's
		// query) is still found by redact in the value's text.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(blank(x))
		s = strings.TrimSuffix(b.String(), "\n")
	}
	return Excerpt(s, n, secrets)
}

// TextMax bounds the rationale and reason a notification carries.
const TextMax = 1000

// Excerpt is s on one printable line, with the secrets replaced, cut to
// at most n bytes. What a box wrote reaches a notification only through
// it: a newline there could add a line of the box's own, such as a
// forged "approve with" for another gate, and a control character could
// drive the receiver's terminal.
func Excerpt(s string, n int, secrets []string) string {
	return cut(cli.Printable(strings.Join(strings.Fields(redact(s, secrets)), " ")), n)
}

// cut shortens s to at most n bytes at a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8Start(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// Render is the webhook request for m in format: its body and the
// headers it needs beside Header.
func Render(format string, m *Message) (body []byte, headers map[string]string, err error) {
	headers = map[string]string{"Content-Type": "application/json"}
	var v any
	switch format {
	case JSON, "":
		v = m
	case Discord:
		// Discord refuses content over 2000 characters.
		v = map[string]any{"content": cut(m.Text, 1900), "username": "impyard", "allowed_mentions": map[string]any{"parse": []string{}}}
	case Slack:
		v = map[string]any{"text": m.Text, "mrkdwn": false}
	case Ntfy:
		headers = map[string]string{"Content-Type": "text/plain; charset=utf-8", "Title": title(m), "Tags": "impyard," + m.Event}
		return []byte(m.Text), headers, nil
	default:
		return nil, nil, fmt.Errorf("unknown notification format %q (want %s)", format, strings.Join(Formats, ", "))
	}
	body, err = json.Marshal(v)
	return body, headers, err
}

// title is the one line that heads m.
func title(m *Message) string {
	switch m.Event {
	case GateFiled:
		if m.Count > 1 {
			return fmt.Sprintf("%s filed %d gates that wait: %s", m.Imp, m.Count, strings.Join(m.Gates, ", "))
		}
		return fmt.Sprintf("%s wants %s: gate %s waits", m.Imp, m.Intent, m.Gate)
	case TaskFailed:
		return fmt.Sprintf("task %s of %s failed", m.Task, m.Imp)
	case TaskNeedsReview:
		return fmt.Sprintf("task %s of %s needs review", m.Task, m.Imp)
	case TrustEarnedRemoved:
		return fmt.Sprintf("earned trust of %s for %s taken back", m.Imp, m.Intent)
	case GateExpiring:
		return fmt.Sprintf("gate %s of %s (%s) expires soon, undecided", m.Gate, m.Imp, m.Intent)
	case BudgetWarning:
		return fmt.Sprintf("%s is near its budget", m.Imp)
	case Pause, Resume:
		what := "the yard"
		if m.Imp != "" {
			what = m.Imp
		}
		return fmt.Sprintf("%s: %s", m.Event, what)
	}
	return m.Event + " " + m.Imp
}

// Compose fills m's Text from its other fields: the title, then each
// field that is set, and the notification id last.
func (m *Message) Compose() {
	lines := []string{title(m)}
	what := "payload"
	switch {
	case m.Count > 1:
		what = "gates"
	case m.Gate == "":
		what = "task"
	}
	for _, f := range [][2]string{{"why", m.Rationale}, {"reason", m.Reason}, {what, m.Summary}, {"sha256", m.SHA256}, {"approve with", m.Approve}} {
		if f[1] != "" {
			lines = append(lines, f[0]+": "+f[1])
		}
	}
	lines = append(lines, "id: "+m.ID)
	m.Text = strings.Join(lines, "\n")
}

// Fold is one message telling of the gate-filed messages ms of one imp,
// oldest first: its title names how many and which, its summary each
// gate's intent and payload in turn, and its id is the first's with the
// number of the others ("<id>+<n>"), the same on every attempt with the
// same gates. One message is itself.
func Fold(ms []*Message) *Message {
	if len(ms) == 1 {
		return ms[0]
	}
	f := &Message{Schema: ms[0].Schema, ID: ms[0].ID + "+" + strconv.Itoa(len(ms)-1), Event: GateFiled,
		At: ms[0].At, Imp: ms[0].Imp, Count: len(ms)}
	var each []string
	for _, m := range ms {
		f.Gates = append(f.Gates, m.Gate)
		each = append(each, fmt.Sprintf("%s %s (%s)", m.Gate, m.Intent, m.Summary))
	}
	f.Summary = cut(strings.Join(each, "; "), TextMax)
	f.Compose()
	return f
}
