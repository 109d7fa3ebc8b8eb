package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/crash"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
)

// The receivers of a notification, as an outbox entry's Done names them.
const (
	ByCommand = "command"
	ByWebhook = "webhook"
)

// errNoDecision is a gate-filed event for a gate a trust rule approved as
// it was filed: no decision waits, so the owner is not told.
var errNoDecision = errors.New("filed already approved by a trust rule; no decision waits")

// Notify delivers the outbox (lib/notify) until ctx is done, a pass every
// poll.
func (r *Runner) Notify(ctx context.Context, poll time.Duration) {
	for {
		if err := r.NotifyOnce(ctx, time.Now()); err != nil && ctx.Err() == nil {
			r.logf("notify: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
	}
}

// NotifyOnce makes one pass over the outbox: every entry due at now is
// delivered to each receiver [notify] names that does not have it yet,
// dropped when the owner did not ask for its event, or given its next
// attempt after backoff. Without a readable org.toml nothing moves.
func (r *Runner) NotifyOnce(ctx context.Context, now time.Time) error {
	org, err := config.LoadOrg(r.Yard)
	if err != nil {
		return fmt.Errorf("notifications wait: %w", err)
	}
	entries, bad := notify.Pending(r.Yard)
	for _, err := range bad {
		r.logf("notify: %v", err)
	}
	for _, en := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if en.Next.After(now) {
			continue
		}
		if err := r.claimed(ctx, org, en.ID, now); err != nil {
			r.logf("notification %s: %v", en.ID, err)
		}
	}
	return nil
}

// claimed delivers the entry eid if no other deliverer holds it and it
// is still pending and due once this one does.
func (r *Runner) claimed(ctx context.Context, org *config.Org, eid string, now time.Time) error {
	release, ok, err := notify.Claim(r.Yard, eid)
	if err != nil || !ok {
		return err
	}
	defer release()
	en, err := notify.Get(r.Yard, eid)
	if errors.Is(err, notify.ErrGone) {
		return nil
	}
	if err != nil || en.Next.After(now) {
		return err
	}
	return r.notifyOne(ctx, org, en, now)
}

func (r *Runner) notifyOne(ctx context.Context, org *config.Org, en *notify.Entry, now time.Time) error {
	n := &org.Notify
	if !n.Wants(en.Event) {
		return notify.Drop(r.Yard, en.ID)
	}
	secrets, err := r.secrets(org)
	if err != nil {
		err = fmt.Errorf("not sent, its secrets could not all be read to keep them out: %w", err)
	}
	var m *notify.Message
	if err == nil {
		m, err = r.message(en, secrets)
	}
	if errors.Is(err, errNoDecision) {
		return notify.Drop(r.Yard, en.ID)
	}
	var done []string
	if err == nil {
		done, err = r.send(ctx, org, en, m)
	}
	if err != nil {
		en, ferr := notify.Failed(r.Yard, en.ID, done, err, now, n.Backoff.Duration)
		if ferr != nil {
			return errors.Join(err, ferr)
		}
		r.logf("notification %s: attempt %d failed (%v); next at %s", en.ID, en.Attempts, err, en.Next.Format(time.RFC3339))
		return nil
	}
	if _, err := notify.Delivered(r.Yard, en.ID, done, now); err != nil {
		return err
	}
	r.logf("notification %s: %s %s delivered (%s)", en.ID, en.Event, en.Subject, strings.Join(done, ", "))
	return nil
}

// send gives m to each receiver that does not have it yet and returns
// those that took it, with the others' errors.
func (r *Runner) send(ctx context.Context, org *config.Org, en *notify.Entry, m *notify.Message) (done []string, err error) {
	n := &org.Notify
	crash.Point("before-notify")
	var errs []error
	if len(n.Command) > 0 && !slices.Contains(en.Done, ByCommand) {
		if err := r.notifyCommand(ctx, n, m); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, ByCommand)
		}
	}
	if n.Webhook != "" && !slices.Contains(en.Done, ByWebhook) {
		if err := r.notifyWebhook(ctx, org, m); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, ByWebhook)
		}
	}
	crash.Point("after-notify")
	return done, errors.Join(errs...)
}

// message is what the notification of en tells, read from its record as
// it is now, with every secret replaced.
func (r *Runner) message(en *notify.Entry, secrets []string) (*notify.Message, error) {
	m := &notify.Message{Schema: store.Schema(notify.Kind, notify.Major), ID: en.ID, Event: en.Event,
		At: store.Second(en.At).Format(time.RFC3339), Imp: en.Imp}
	switch en.Event {
	case notify.GateFiled:
		g, err := gate.Get(r.Yard, en.Subject)
		if err != nil {
			return nil, err
		}
		if g.Trust != nil && g.Trust.Level == config.Auto {
			return nil, errNoDecision
		}
		m.Gate, m.Task, m.Intent, m.Rationale = g.ID, g.Task, g.Intent, notify.Excerpt(g.Rationale, notify.TextMax, secrets)
		m.Summary = notify.Summarize(g.Payload, 200, secrets)
		if _, err := g.Frozen(); err != nil {
			// Edited after filing (its sha256 perhaps cut short): nothing
			// can approve it, so nothing is offered to.
			m.Summary = "EDITED after filing, it can never be approved: " + m.Summary
		} else {
			m.SHA256 = g.SHA256[:gate.ShaDigits]
			m.Approve = g.ApproveCommand()
		}
	case notify.TrustEarnedRemoved:
		g, err := gate.Get(r.Yard, en.Subject)
		if err != nil {
			return nil, err
		}
		m.Gate, m.Task, m.Intent = g.ID, g.Task, g.Intent
		m.Reason = fmt.Sprintf("the owner denied %s, which earned trust would have approved: the earned [[trust]] entries of %s for %s are removed from imps/%s/imp.toml, so its gates wait for the owner again",
			g.ID, g.Imp, g.Intent, g.Imp)
		m.Summary = notify.Summarize(g.Payload, 200, secrets)
	case notify.Pause, notify.Resume:
		m.Reason = notify.Excerpt(en.Why, notify.TextMax, secrets)
	default:
		t, err := queue.Get(r.Yard, en.Subject)
		if err != nil {
			return nil, err
		}
		if en.Seq > len(t.History) {
			return nil, fmt.Errorf("task %s has no transition %d", t.ID, en.Seq)
		}
		m.Task, m.Reason = t.ID, notify.Excerpt(t.History[en.Seq-1].Why, notify.TextMax, secrets)
		m.Summary = notify.Excerpt(t.Text, 200, secrets)
	}
	m.Compose()
	m.Redact(secrets)
	return m, nil
}

// secrets are the values a notification must never carry: every secret
// impgw injects, the org token, the headers of the executors and the
// webhook's own address (a chat webhook URL is its credential).
func (r *Runner) secrets(org *config.Org) ([]string, error) {
	var out []string
	dir := home.Dir(r.Home).Secrets()
	files, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, f := range files {
		b, err := store.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, string(b), strings.TrimSpace(string(b)))
	}
	if tok, err := token.OrgToken(r.Home); err == nil {
		out = append(out, tok)
	}
	for _, e := range org.Executors {
		for _, v := range e.Headers {
			out = append(out, v)
		}
	}
	if org.Notify.Webhook != "" {
		out = append(out, org.Notify.Webhook)
	}
	return out, nil
}

// notifyCommand runs [notify] command with m as JSON on standard input.
func (r *Runner) notifyCommand(ctx context.Context, n *config.Notify, m *notify.Message) error {
	in, _, err := notify.Render(notify.JSON, m)
	if err != nil {
		return err
	}
	if out, err := runCommand(ctx, n.Command, n.Timeout.Duration, in); err != nil {
		return fmt.Errorf("%s %s: %w: %s", ByCommand, n.Command[0], err, trim(strings.TrimSpace(out), 300))
	}
	return nil
}

// notifyWebhook POSTs m in the configured format to [notify] webhook
// through impgw as org, like an http executor: the gateway judges it,
// injects any credential its rule names and records it.
func (r *Runner) notifyWebhook(ctx context.Context, org *config.Org, m *notify.Message) error {
	n := &org.Notify
	body, headers, err := notify.Render(n.Format, m)
	if err != nil {
		return err
	}
	var refused string
	client, err := r.client(org.Gateway.Listen, n.Timeout.Duration, func(resp *http.Response) {
		if resp.StatusCode != http.StatusOK {
			refused = fmt.Sprintf("%s (decision %s)", resp.Status, resp.Header.Get("X-Impgw-Decision"))
		}
	})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Webhook, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", ByWebhook, err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(notify.Header, m.ID)
	req.Header.Set(IdempotencyKey, m.ID)
	// The address is a secret of its own (see secrets): errors name the
	// host only.
	where := req.URL.Host
	resp, err := client.Do(req)
	if err != nil && refused != "" {
		return fmt.Errorf("%s: the gateway refused to connect to %s: %s", ByWebhook, where, refused)
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = where
		}
		return fmt.Errorf("%s: POST through the gateway at %s: %w", ByWebhook, org.Gateway.Listen, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s answered %d: %s", ByWebhook, where, resp.StatusCode, trim(strings.TrimSpace(string(rb)), 300))
	}
	return nil
}
