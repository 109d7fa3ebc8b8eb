package executor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"text/template"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/mcpcall"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
)

// IdempotencyKey is the header that carries the gate id to the upstream,
// which can then apply a repeated request once.
const IdempotencyKey = "Idempotency-Key"

// sendHTTP sends the action through impgw as the org subject, so the
// gateway judges it, injects the credential and logs it like any request.
func (r *Runner) sendHTTP(ctx context.Context, g *gate.Gate, listen string, exe *config.Executor, payload []byte) (*Result, error) {
	// A refused CONNECT comes back from net/http as a bare error; note the
	// gateway's answer here to know that nothing was sent.
	var refused string
	client, err := r.client(listen, exe.Timeout.Duration, func(resp *http.Response) {
		if resp.StatusCode != http.StatusOK {
			refused = fmt.Sprintf("%s (decision %s)", resp.Status, resp.Header.Get("X-Impgw-Decision"))
		}
	})
	if err != nil {
		return nil, &outcome{err: err}
	}
	body, err := render(exe.Template, payload)
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("executor template for %s: %w", g.Intent, err)}
	}
	req, err := http.NewRequestWithContext(ctx, exe.Method, exe.URL, bytes.NewReader(body))
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("executor for %s: %w", g.Intent, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range exe.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(IdempotencyKey, g.ID)
	resp, err := client.Do(req)
	if err != nil && refused != "" {
		return nil, &outcome{err: fmt.Errorf("the gateway refused to connect to %s: %s", exe.URL, refused)}
	}
	if err != nil {
		var op *net.OpError
		notSent := errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
		return nil, &outcome{err: fmt.Errorf("send %s %s through the gateway at %s: %w", exe.Method, exe.URL, listen, err), sent: !notSent, transient: true}
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	res := &Result{Kind: config.HTTP, Status: resp.StatusCode, Body: trim(string(rb), 2048)}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return res, nil
	}
	if resp.Header.Get("X-Impgw-Decision") != "" && bytes.HasPrefix(rb, []byte("impgw: ")) {
		return nil, &outcome{err: fmt.Errorf("the gateway refused %s %s (decision %s): %s", exe.Method, exe.URL, resp.Header.Get("X-Impgw-Decision"), trim(string(bytes.TrimSpace(rb)), 300))}
	}
	transient := resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return nil, &outcome{err: fmt.Errorf("%s %s answered %d: %s", exe.Method, exe.URL, resp.StatusCode, trim(string(rb), 300)), sent: transient, transient: transient}
}

// gatewayUp checks, for an executor that sends through impgw, that impgw
// answers, so that a gateway that is down leaves the gate to a later
// attempt instead of failing it.
func (r *Runner) gatewayUp(org *config.Org, exe *config.Executor) error {
	switch exe.Kind {
	case config.HTTP:
		return health.GatewayUp(org.Gateway.Listen)
	case config.MCP:
		return mcpcall.Up(r.Home)
	}
	return nil
}

// client builds an HTTP client whose every request goes through the
// gateway with the org token as proxy credentials, trusting the gateway's
// CA for the TLS it terminates.
func (r *Runner) client(listen string, timeout time.Duration, onConnect func(*http.Response)) (*http.Client, error) {
	tok, err := token.OrgToken(r.Home)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	caPath := home.Dir(r.Home).CACert()
	if pem, err := store.ReadFile(caPath); err == nil {
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificate in it", caPath)
		}
	}
	proxy := &url.URL{Scheme: "http", User: url.UserPassword(token.Org, tok), Host: listen}
	tr := &http.Transport{
		Proxy: http.ProxyURL(proxy),
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
			onConnect(resp)
			return nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: false,
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// render produces the request body: the frozen payload itself, or the
// executor's template applied to it. In a template, {{json .field}}
// writes a value as JSON.
func render(tmpl string, payload []byte) ([]byte, error) {
	if tmpl == "" {
		return payload, nil
	}
	var data any
	if err := json.Unmarshal(payload, &data); err != nil {
		return nil, err
	}
	t, err := template.New("body").Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).Parse(tmpl)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
