package config

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/notify"
)

// Notify is [notify]: which events the owner hears of and how. impexec
// runs Command with the notification as JSON on standard input and POSTs
// it to Webhook through impgw as org, rendered in Format; a receiver that
// fails is tried again after Backoff, doubling.
type Notify struct {
	On      []string `toml:"on"`
	Command []string `toml:"command"`
	Webhook string   `toml:"webhook"`
	Format  string   `toml:"format"`
	Backoff Duration `toml:"backoff"`
	Timeout Duration `toml:"timeout"`
}

// Defaults of [notify].
const (
	DefaultNotifyBackoff = 5 * time.Second
	DefaultNotifyTimeout = 10 * time.Second
)

// Wants reports whether the owner asked to hear of event and named a
// receiver for it.
func (n *Notify) Wants(event string) bool {
	return (len(n.Command) > 0 || n.Webhook != "") && (slices.Contains(n.On, event) || slices.Contains(notify.Always, event))
}

func (n *Notify) defaults() {
	if n.On == nil {
		n.On = []string{notify.GateFiled}
	}
	if n.Format == "" {
		n.Format = notify.JSON
	}
	if n.Backoff.Duration == 0 {
		n.Backoff.Duration = DefaultNotifyBackoff
	}
	if n.Timeout.Duration == 0 {
		n.Timeout.Duration = DefaultNotifyTimeout
	}
}

func (n *Notify) check(p string, b []byte) error {
	for _, e := range n.On {
		if !slices.Contains(notify.Events, e) {
			return bad(p, b, "on", "[notify]: unknown event %q (want %s)", e, strings.Join(notify.Events, ", "))
		}
	}
	if n.Command != nil && (len(n.Command) == 0 || n.Command[0] == "") {
		return bad(p, b, "command", "[notify]: command names no program")
	}
	if n.Webhook != "" && !strings.HasPrefix(n.Webhook, "https://") {
		return bad(p, b, "webhook", "[notify]: webhook must be https:// (it is sent through impgw, which injects credentials only over TLS)")
	}
	// Checked here, where the error names no part of it: a chat webhook's
	// URL is its credential, and a parse error at delivery would quote it
	// into the outbox, the log and impsup status.
	if u, err := url.Parse(n.Webhook); n.Webhook != "" && (err != nil || u.Hostname() == "") {
		return bad(p, b, "webhook", "[notify]: webhook is not a URL with a host (its text is not repeated here: it may be a credential)")
	}
	if n.Format != "" && !slices.Contains(notify.Formats, n.Format) {
		return bad(p, b, "format", "[notify]: unknown format %q (want %s)", n.Format, strings.Join(notify.Formats, ", "))
	}
	return nil
}
