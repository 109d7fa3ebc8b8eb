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
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
)

// The receivers of a notification, as an outbox entry's Done names them.
const (
	ByCommand = "command"
	ByWebhook = "webhook"
)

// errNoDecision is a gate-filed event for a gate a trust rule approved as
// it was filed, or a gate-expiring one for a gate decided since: no
// decision waits, so the owner is not told.
var errNoDecision = errors.New("filed already approved by a trust rule; no decision waits")

// Notify delivers the outbox (lib/notify) until ctx is done, a pass every
// poll.
func (r *Runner) Notify(ctx context.Context, poll time.Duration) {
	told := ""
	for {
		told = r.notifyPass(ctx, told)
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
	}
}

// notifyPass is one pass of Notify, its error logged only when it is
// not told, the error of the pass before: a broken org.toml stops every
// pass until it is fixed, and one line says so, not one a poll. It
// returns what it told.
func (r *Runner) notifyPass(ctx context.Context, told string) string {
	err := r.NotifyOnce(ctx, time.Now())
	if err == nil || ctx.Err() != nil {
		if told != "" && ctx.Err() == nil {
			r.logf("notify: notifications go on")
		}
		return ""
	}
	if err.Error() != told {
		r.logf("notify: %v", err)
	}
	return err.Error()
}

// NotifyOnce writes the budget warnings due at now (Warn) and makes one
// pass over the outbox: every entry due at now is
// delivered to each receiver [notify] names that does not have it yet,
// dropped when the owner did not ask for its event, or given its next
// attempt after backoff. Without a readable org.toml nothing moves.
//
// The gates one imp files are told together: a gate-filed entry waits
// until [notify] coalesce has passed since the imp's last gate-filed
// notification was delivered, and then every gate-filed entry of the imp
// that is due goes out in one message (notify.Fold). So a box filing a
// gate a second is told once a minute, not sixty times, and a lone gate
// after a quiet spell is told at once.
func (r *Runner) NotifyOnce(ctx context.Context, now time.Time) error {
	org, err := r.Org()
	if err != nil {
		return fmt.Errorf("notifications wait: %w", err)
	}
	r.Warn(org, now)
	entries, bad := notify.Pending(r.Yard)
	for _, err := range bad {
		r.logf("notify: %v", err)
	}
	var told map[string]time.Time
	seen := map[string]bool{}
	for _, en := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if en.Next.After(now) {
			continue
		}
		if en.Event != notify.GateFiled {
			if err := r.claimed(ctx, org, []string{en.ID}, now); err != nil {
				r.logf("notification %s: %v", en.ID, err)
			}
			continue
		}
		if seen[en.Imp] {
			continue
		}
		seen[en.Imp] = true
		if told == nil {
			told = lastGateNotices(r.Yard)
		}
		if last, ok := told[en.Imp]; ok && last.Add(org.Notify.Coalesce.Duration).After(now) {
			continue
		}
		var ids []string
		for _, o := range entries {
			if o.Event == notify.GateFiled && o.Imp == en.Imp && !o.Next.After(now) {
				ids = append(ids, o.ID)
			}
		}
		if err := r.claimed(ctx, org, ids, now); err != nil {
			r.logf("notification %s: %v", strings.Join(ids, ", "), err)
		}
	}
	return nil
}

// lastGateNotices is when each imp's last gate-filed notification was
// delivered, read from the outbox's sent/ (which keeps a week of them).
func lastGateNotices(y *yard.Yard) map[string]time.Time {
	sent, _ := notify.Sent(y)
	last := map[string]time.Time{}
	for _, en := range sent {
		if en.Event == notify.GateFiled && en.Sent.After(last[en.Imp]) {
			last[en.Imp] = en.Sent
		}
	}
	return last
}

// claimed delivers, in one message, the entries of ids that no other
// deliverer holds and that are still pending and due once this one
// holds them.
func (r *Runner) claimed(ctx context.Context, org *config.Org, ids []string, now time.Time) error {
	var ens []*notify.Entry
	for _, eid := range ids {
		release, ok, err := notify.Claim(r.Yard, eid)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		defer release()
		en, err := notify.Get(r.Yard, eid)
		if errors.Is(err, notify.ErrGone) {
			continue
		}
		if err != nil {
			return err
		}
		if !en.Next.After(now) {
			ens = append(ens, en)
		}
	}
	if len(ens) == 0 {
		return nil
	}
	return r.notifyEntries(ctx, org, ens, now)
}

// notifyEntries tells of ens in one message: each receiver that some of
// them have not reached yet is sent it, and each entry is then delivered
// or given its next attempt. An entry whose message cannot be made is
// given its next attempt alone.
func (r *Runner) notifyEntries(ctx context.Context, org *config.Org, ens []*notify.Entry, now time.Time) error {
	n := &org.Notify
	var errs []error
	fail := func(en *notify.Entry, done []string, cause error) {
		en, err := notify.Failed(r.Yard, en.ID, done, cause, now, n.Backoff.Duration)
		if err != nil {
			errs = append(errs, errors.Join(cause, err))
			return
		}
		r.logf("notification %s: attempt %d failed (%v); next at %s", en.ID, en.Attempts, cause, en.Next.Format(time.RFC3339))
	}
	secrets, err := r.secrets(org)
	if err != nil {
		err = fmt.Errorf("not sent, its secrets could not all be read to keep them out: %w", err)
	}
	var kept []*notify.Entry
	var ms []*notify.Message
	for _, en := range ens {
		if !n.Wants(en.Event) {
			errs = append(errs, notify.Drop(r.Yard, en.ID))
			continue
		}
		if err != nil {
			fail(en, nil, err)
			continue
		}
		m, merr := r.message(org, en, secrets)
		if errors.Is(merr, errNoDecision) {
			errs = append(errs, notify.Drop(r.Yard, en.ID))
			continue
		}
		if merr != nil {
			fail(en, nil, merr)
			continue
		}
		kept, ms = append(kept, en), append(ms, m)
	}
	if len(kept) == 0 {
		return errors.Join(errs...)
	}
	m := notify.Fold(ms)
	done, err := r.send(ctx, org, kept, m)
	for _, en := range kept {
		if err != nil {
			fail(en, done, err)
			continue
		}
		if _, derr := notify.Delivered(r.Yard, en.ID, done, now); derr != nil {
			errs = append(errs, derr)
			continue
		}
		r.logf("notification %s: %s %s delivered (%s)", en.ID, en.Event, en.Subject, strings.Join(done, ", "))
	}
	return errors.Join(errs...)
}

// send gives m to each receiver that one of ens does not have yet and
// returns those that took it, with the others' errors.
func (r *Runner) send(ctx context.Context, org *config.Org, ens []*notify.Entry, m *notify.Message) (done []string, err error) {
	n := &org.Notify
	crash.Point("before-notify")
	has := func(receiver string) bool {
		for _, en := range ens {
			if !slices.Contains(en.Done, receiver) {
				return false
			}
		}
		return true
	}
	var errs []error
	if len(n.Command) > 0 && !has(ByCommand) {
		if err := r.notifyCommand(ctx, n, m); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, ByCommand)
		}
	}
	if n.Webhook != "" && !has(ByWebhook) {
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
func (r *Runner) message(org *config.Org, en *notify.Entry, secrets []string) (*notify.Message, error) {
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
		m.Link = org.Desk.GateLink(g.ID)
	case notify.TrustEarnedRemoved:
		g, err := gate.Get(r.Yard, en.Subject)
		if err != nil {
			return nil, err
		}
		m.Gate, m.Task, m.Intent = g.ID, g.Task, g.Intent
		m.Reason = fmt.Sprintf("the owner denied %s, which earned trust would have approved: the earned [[trust]] entries of %s for %s are removed from imps/%s/imp.toml, so its gates wait for the owner again",
			g.ID, g.Imp, g.Intent, g.Imp)
		m.Summary = notify.Summarize(g.Payload, 200, secrets)
	case notify.GateExpiring:
		g, err := gate.Get(r.Yard, en.Subject)
		if err != nil {
			return nil, err
		}
		if g.State != state.Filed {
			return nil, errNoDecision
		}
		org, _ := r.Org()
		m.Gate, m.Task, m.Intent, m.Rationale = g.ID, g.Task, g.Intent, notify.Excerpt(g.Rationale, notify.TextMax, secrets)
		m.Summary = notify.Summarize(g.Payload, 200, secrets)
		m.Reason = fmt.Sprintf("expires undecided at %s, filed %s; then its task goes to review", store.Second(g.Deadline(org)).Format(time.RFC3339), store.Second(g.Created).Format(time.RFC3339))
		if g.Matches() {
			m.SHA256, m.Approve = g.SHA256[:gate.ShaDigits], g.ApproveCommand()
		}
	case notify.Pause, notify.Resume, notify.BudgetWarning:
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
