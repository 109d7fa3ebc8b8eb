package config

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/yard"
)

// Notify is [notify]: which events the owner hears of and how. impexec
// runs Command with the notification as JSON on standard input and POSTs
// it to Webhook through impgw as org, rendered in Format; a receiver that
// fails is tried again after Backoff, doubling. The gates one imp files
// are told at most once per Coalesce: those filed within it of the last
// message go together in the next.
type Notify struct {
	On       []string `toml:"on"`
	Command  []string `toml:"command"`
	Webhook  string   `toml:"webhook"`
	Format   string   `toml:"format"`
	Backoff  Duration `toml:"backoff"`
	Timeout  Duration `toml:"timeout"`
	Coalesce Duration `toml:"coalesce"`
	// Remind is how long before a gate expires the owner hears a
	// gate-expiring, once.
	Remind Duration `toml:"remind"`
}

// Defaults of [notify].
const (
	DefaultNotifyBackoff = 5 * time.Second
	DefaultNotifyTimeout = 10 * time.Second
	DefaultCoalesce      = time.Minute
	DefaultRemind        = time.Hour
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
	if n.Coalesce.Duration == 0 {
		n.Coalesce.Duration = DefaultCoalesce
	}
	if n.Remind.Duration == 0 {
		n.Remind.Duration = DefaultRemind
	}
}

func (n *Notify) check(p string, b []byte) error {
	for _, e := range n.On {
		if !slices.Contains(notify.Events, e) {
			return bad(p, b, "on", "[notify]: unknown event %q (want %s)", e, strings.Join(notify.Events, ", "))
		}
	}
	if n.Coalesce.Duration < 0 {
		return bad(p, b, "coalesce", "[notify]: coalesce must be positive")
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

// asked is org.toml's [notify] as this process last loaded it, with what
// lstat said of the file then: a transition into a notifying event asks
// whether anyone would hear of it, and re-reading and checking the whole
// file for each would cost more than the entry it may spare.
var asked struct {
	sync.Mutex
	path   string
	key    fileKey
	notify *Notify // nil: org.toml did not load
}

// fileKey tells one state of a file from another without reading it; an
// atomic rewrite (a new inode) or an edit in place (a new size or mtime)
// changes it.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	exists   bool
}

func keyOf(p string) (fileKey, error) {
	var st unix.Stat_t
	err := unix.Lstat(p, &st)
	if errors.Is(err, unix.ENOENT) {
		return fileKey{}, nil
	}
	if err != nil {
		return fileKey{}, err
	}
	return fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, exists: true}, nil
}

// Notifies reports whether org.toml, as it is now, names a receiver for
// event (Notify.Wants): lib/notify writes an outbox entry only then. An
// org.toml that does not load (or cannot be looked at) says yes: an entry
// the deliverer drops once the file is fixed costs less than a
// notification never written. The file is read once per process and
// again only when lstat shows it changed (device, inode, size, mtime).
func Notifies(y *yard.Yard, event string) bool {
	p := OrgPath(y)
	key, err := keyOf(p)
	if err != nil {
		return true
	}
	asked.Lock()
	defer asked.Unlock()
	if asked.path != p || asked.key != key {
		asked.path, asked.key, asked.notify = p, key, nil
		if o, err := LoadOrg(y); err == nil {
			asked.notify = &o.Notify
		}
	}
	return asked.notify == nil || asked.notify.Wants(event)
}
