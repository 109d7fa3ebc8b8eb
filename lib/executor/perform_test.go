package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
)

// retryLines keeps the "retrying in" part of each retry log line.
func retryLines(logs []string) []string {
	var out []string
	for _, l := range logs {
		if _, after, ok := strings.Cut(l, "; retrying in "); ok {
			out = append(out, after)
		}
	}
	return out
}

func TestPerformRetries(t *testing.T) {
	for _, c := range []struct {
		name       string
		idempotent bool
		retries    int
		answers    []int
		ok         bool
		requests   int
		waits      []string
	}{
		{"idempotent recovers", true, 3, []int{503, 429, 200}, true, 3, []string{"1ms", "2ms"}},
		{"idempotent gives up after its retries", true, 2, []int{500}, false, 3, []string{"1ms", "2ms"}},
		{"idempotent default is three retries", true, 0, []int{503}, false, 4, []string{"1ms", "2ms", "4ms"}},
		{"one retry", true, 1, []int{408}, false, 2, []string{"1ms"}},
		{"not transient is not retried", true, 3, []int{400, 200}, false, 1, nil},
		{"not idempotent is never retried", false, 3, []int{503, 200}, false, 1, nil},
		{"not idempotent succeeds once", false, 3, []int{201}, true, 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, statuses(c.answers...))
			gw := newGateway(t, false)
			r, logs := httpRunner(t, u)
			exe := httpExecutor(u.srv.URL)
			exe.Idempotent, exe.Retries = c.idempotent, c.retries
			org := &config.Org{}
			org.Gateway.Listen = gw.listen()
			res, err := r.perform(context.Background(), sendGate, org, exe, []byte(`{}`))
			got := u.requests()
			if len(got) != c.requests {
				t.Errorf("upstream saw %d requests, want %d", len(got), c.requests)
			}
			for i, s := range got {
				if k := s.header.Get(IdempotencyKey); k != sendGate.ID {
					t.Errorf("request %d carried key %q, want the gate id on every attempt", i+1, k)
				}
			}
			if c.ok {
				if err != nil || res.Attempts != c.requests || res.Status != c.answers[len(c.answers)-1] {
					t.Errorf("got %+v %v, want success after %d attempts", res, err, c.requests)
				}
			} else if err == nil {
				t.Errorf("got %+v, want the last failure", res)
			} else if want := fmt.Sprintf("answered %d: answer %d to request %d", c.answers[min(c.requests, len(c.answers))-1], c.answers[min(c.requests, len(c.answers))-1], c.requests); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q, want the last attempt's %q", err, want)
			}
			if w := retryLines(*logs); !slices.Equal(w, c.waits) {
				t.Errorf("waited %q, want %q (doubling from the backoff)", w, c.waits)
			}
		})
	}
}

func TestPerformDefaultBackoff(t *testing.T) {
	u := newUpstream(t, statuses(503, 200))
	gw := newGateway(t, false)
	r, logs := httpRunner(t, u)
	r.Backoff = 0
	exe := httpExecutor(u.srv.URL)
	exe.Idempotent = true
	org := &config.Org{}
	org.Gateway.Listen = gw.listen()
	res, err := r.perform(context.Background(), sendGate, org, exe, nil)
	if err != nil || res.Attempts != 2 {
		t.Fatalf("got %+v %v, want success on the second attempt", res, err)
	}
	if w := retryLines(*logs); !slices.Equal(w, []string{"200ms"}) {
		t.Errorf("waited %q, want the default 200ms", w)
	}
}

// Cancelling while waiting to retry stops at once, without another attempt.
func TestPerformCancelledWhileWaiting(t *testing.T) {
	u := newUpstream(t, statuses(503))
	gw := newGateway(t, false)
	r, _ := httpRunner(t, u)
	r.Backoff = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.Logf = func(format string, a ...any) {
		if strings.Contains(format, "retrying") {
			cancel()
		}
	}
	exe := httpExecutor(u.srv.URL)
	exe.Idempotent = true
	org := &config.Org{}
	org.Gateway.Listen = gw.listen()
	_, err := r.perform(ctx, sendGate, org, exe, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if n := len(u.requests()); n != 1 {
		t.Errorf("upstream saw %d requests, want 1", n)
	}
}

func TestPerformUnknownKind(t *testing.T) {
	r, _ := httpRunner(t, nil)
	_, err := r.perform(context.Background(), sendGate, &config.Org{}, &config.Executor{Kind: "carrier-pigeon", Idempotent: true}, nil)
	var o *outcome
	if !errors.As(err, &o) || o.sent || o.transient || err.Error() != `executor kind "carrier-pigeon" is not available in this impexec` {
		t.Errorf("got %v, want a refusal naming the kind", err)
	}
}

func TestIdempotent(t *testing.T) {
	for _, c := range []struct {
		exe  config.Executor
		want bool
	}{
		{config.Executor{Kind: config.HTTP}, false},
		{config.Executor{Kind: config.HTTP, Idempotent: true}, true},
		{config.Executor{Kind: config.MessageUser}, true},
		{config.Executor{Kind: config.MessageUser, Command: []string{"notify"}}, false},
		{config.Executor{Kind: config.MessageUser, Command: []string{"notify"}, Idempotent: true}, true},
		{config.Executor{Kind: config.EgressGrant}, true},
		{config.Executor{Kind: config.GitPush}, true},
		{config.Executor{Kind: "other"}, false},
	} {
		if got := idempotent(&c.exe); got != c.want {
			t.Errorf("idempotent(%+v) = %v, want %v", c.exe, got, c.want)
		}
	}
}

func TestSummaryAndTrim(t *testing.T) {
	for _, c := range []struct {
		res  Result
		want string
	}{
		{Result{Kind: "http", Status: 202, Attempts: 2}, "http status 202 after 2 attempt(s)"},
		{Result{Kind: "egress-grant", Detail: "rule x added"}, "egress-grant: rule x added"},
		{Result{Kind: "message-user"}, "message-user"},
	} {
		if got := summary(&c.res); got != c.want {
			t.Errorf("summary(%+v) = %q, want %q", c.res, got, c.want)
		}
	}
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"", 0, ""},
		{"a\xffb", 5, "a?b"},
	} {
		if got := trim(c.s, c.n); got != c.want {
			t.Errorf("trim(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
