package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
)

// upstream stands in on loopback for the gateway and the mail API behind
// it: it answers each request with the next of its statuses (the last one
// again once they run out) and logs when each arrived and under which key.
type retryUpstream struct {
	srv      *httptest.Server
	statuses []int
	refuse   bool // answer as the gateway refusing the request

	mu   sync.Mutex
	at   []time.Time
	keys []string
}

func newRetryUpstream(t *testing.T, refuse bool, statuses ...int) *retryUpstream {
	u := &retryUpstream{statuses: statuses, refuse: refuse}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The gateway's own health check, asked in origin form before a
		// send begins, is not a request to the mail API.
		if r.URL.Host == "" && r.URL.Path == "/v1/health" {
			return
		}
		u.mu.Lock()
		n := len(u.at)
		u.at = append(u.at, time.Now())
		u.keys = append(u.keys, r.Header.Get(IdempotencyKey))
		u.mu.Unlock()
		if u.refuse {
			w.Header().Set("X-Impgw-Decision", "d-test")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, "impgw: denied: no rule matches")
			return
		}
		code := u.statuses[min(n, len(u.statuses)-1)]
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"answer":%d}`, code)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *retryUpstream) log() ([]time.Time, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.at...), append([]string(nil), u.keys...)
}

// TestRetries has the upstream answer 5xx, 429 and 4xx, the gateway
// refuse, and the gateway be down, for idempotent and non-idempotent http
// executors, and checks every request that arrived, the backoff between
// them, and how the gate ends: retried until the attempts run out only
// when the executor is idempotent and the failure transient, "outcome
// unknown" only when a non-idempotent request may have taken effect, and
// left approved, nothing begun, while the gateway does not answer.
func TestRetries(t *testing.T) {
	const backoff = 20 * time.Millisecond
	for _, tc := range []struct {
		name       string
		idempotent bool
		retries    int
		statuses   []int
		refuse     bool
		down       bool // no gateway answers at all
		requests   int  // requests the upstream receives
		executed   bool
		unknown    bool // the gate fails with "outcome unknown"
	}{
		{name: "idempotent recovers", idempotent: true, statuses: []int{503, 429, 200}, requests: 3, executed: true},
		{name: "idempotent default attempts", idempotent: true, statuses: []int{503}, requests: 4},
		{name: "idempotent configured retries", idempotent: true, retries: 1, statuses: []int{500}, requests: 2},
		{name: "idempotent rejected", idempotent: true, statuses: []int{400}, requests: 1},
		{name: "idempotent refused by gateway", idempotent: true, refuse: true, requests: 1},
		{name: "idempotent gateway down", idempotent: true, down: true},
		{name: "non-idempotent 503", statuses: []int{503, 200}, requests: 1, unknown: true},
		{name: "non-idempotent 429", statuses: []int{429, 200}, requests: 1, unknown: true},
		{name: "non-idempotent rejected", statuses: []int{400, 200}, requests: 1},
		{name: "non-idempotent refused by gateway", refuse: true, requests: 1},
		{name: "non-idempotent gateway down", down: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newRetryUpstream(t, tc.refuse, tc.statuses...)
			listen := u.srv.Listener.Addr().String()
			if tc.down {
				// Port 0 refuses every connection: nothing was sent.
				listen = "127.0.0.1:0"
			}
			r := setup(t, fmt.Sprintf("[gateway]\nlisten = %q\n[executors.email-send]\nkind = \"http\"\nurl = \"http://mail.test/emails\"\nidempotent = %v\nretries = %d\n",
				listen, tc.idempotent, tc.retries))
			r.Backoff = backoff
			var logged []string
			r.Logf = func(format string, a ...any) { logged = append(logged, fmt.Sprintf(format, a...)) }
			g := approved(t, r, "email-send", `{"to":["a@b.c"]}`)
			out, err := r.Execute(context.Background(), g.ID)
			if tc.down {
				// Nothing begins while the gateway does not answer: the
				// gate stays approved for a later try, and the error is
				// the temporary one.
				if !errors.Is(err, ErrGatewayDown) || out == nil || out.State != state.Approved {
					t.Fatalf("with the gateway down: %v, gate %v; want ErrGatewayDown and the gate still approved", err, out)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			at, keys := u.log()
			if len(at) != tc.requests {
				t.Errorf("the upstream received %d requests, want %d", len(at), tc.requests)
			}
			for _, k := range keys {
				if k != g.ID {
					t.Errorf("a request carried Idempotency-Key %q, want the gate id %s", k, g.ID)
				}
			}
			// Each retry waits twice as long as the one before.
			for i := 1; i < len(at); i++ {
				if gap, want := at[i].Sub(at[i-1]), backoff<<(i-1); gap < want {
					t.Errorf("retry %d came %v after the attempt before, want at least %v", i, gap, want)
				}
			}
			if tc.down {
				for _, l := range logged {
					if strings.Contains(l, "retrying in") {
						t.Errorf("with the gateway down, a send was retried:\n%s", strings.Join(logged, "\n"))
					}
				}
				return
			}
			why := out.History[len(out.History)-1].Why
			switch {
			case tc.executed:
				var res Result
				json.Unmarshal(out.Result, &res)
				if out.State != state.Executed || res.Attempts != tc.requests || res.Status != 200 {
					t.Errorf("gate ended %s (%s) with %+v; want executed after %d attempts", out.State, why, res, tc.requests)
				}
			case out.State != state.Failed:
				t.Errorf("gate ended %s (%s), want failed", out.State, why)
			case tc.unknown != strings.HasPrefix(why, "outcome unknown"):
				t.Errorf("gate failed with %q; outcome unknown: %v, want %v", why, !tc.unknown, tc.unknown)
			}
		})
	}
}
