// Command demo-imp is a tiny imp for impyard's demo and tests. It reads
// its task text (first argument, or standard input), fetches every URL in
// it through the gateway, notes what it saw in its journal, and proposes
// one email to every address in the text with what it found. A task
// "remember: TEXT" (or "remember instead of e-…: TEXT") proposes TEXT for
// its core memory instead (memory-promote). It knows
// nothing but what a box gives every imp: the proxy and CA in its
// environment and its brief; between fetching and proposing it polls its
// mailbox, as an agent does at its turn boundaries.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
)

var (
	urlPattern   = regexp.MustCompile(`https?://[^\s,;]+`)
	emailPattern = regexp.MustCompile(`[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-z]{2,}`)
	rememberTask = regexp.MustCompile(`^remember(?: instead of (e-[0-9a-z]+))?: (.+)$`)
)

func main() {
	text := strings.Join(os.Args[1:], " ")
	if text == "" {
		b, _ := io.ReadAll(os.Stdin)
		text = string(b)
	}
	fmt.Printf("demo-imp: task %s run %s: %q\n", os.Getenv("IMPYARD_TASK"), os.Getenv("IMPYARD_RUN"), text)
	if brief, err := os.ReadFile(os.Getenv("IMPYARD_BRIEF")); err == nil {
		var b struct {
			Open    []json.RawMessage `json:"open_gates"`
			Mailbox []struct {
				Text string `json:"text"`
			} `json:"mailbox"`
			Charter string `json:"charter"`
			Memory  string `json:"memory"`
		}
		json.Unmarshal(brief, &b)
		fmt.Printf("demo-imp: brief: %d open gates, %d messages, charter %d bytes, memory %d bytes\n", len(b.Open), len(b.Mailbox), len(b.Charter), len(b.Memory))
		for _, m := range b.Mailbox {
			fmt.Printf("demo-imp: message from the owner: %s\n", m.Text)
		}
	}
	if m := rememberTask.FindStringSubmatch(strings.TrimSpace(text)); m != nil {
		payload := map[string]any{"text": m[2], "reason": "the task asked me to remember it"}
		if m[1] != "" {
			payload["replaces"] = m[1]
		}
		out := control("POST", "/v1/actions", map[string]any{
			"intent": "memory-promote", "payload": payload, "rationale": "to know it in every run",
			"run_id": os.Getenv("IMPYARD_RUN"), "task_id": os.Getenv("IMPYARD_TASK")})
		fmt.Printf("demo-imp: proposed memory-promote: %s\n", out)
		return
	}
	client := newClient()
	var found []string
	for _, u := range urlPattern.FindAllString(text, -1) {
		status, body := fetch(client, u)
		fmt.Printf("demo-imp: GET %s -> %s\n", u, status)
		found = append(found, fmt.Sprintf("%s: %s %s", u, status, strings.TrimSpace(body)))
	}
	note("fetched " + strings.Join(found, "; "))
	// A turn boundary: the owner may have said more since the brief.
	fmt.Printf("demo-imp: mailbox: %s\n", control("GET", "/v1/mailbox", nil))
	if to := emailPattern.FindAllString(text, -1); len(to) > 0 {
		payload := map[string]any{"to": to, "subject": "What I found", "body": strings.Join(found, "\n")}
		out := control("POST", "/v1/actions", map[string]any{
			"intent": "email-send", "payload": payload, "rationale": "the task asked for an email",
			"run_id": os.Getenv("IMPYARD_RUN"), "task_id": os.Getenv("IMPYARD_TASK")})
		fmt.Printf("demo-imp: proposed email-send: %s\n", out)
	}
}

// newClient sends everything through the box's proxy, even loopback
// addresses, which Go's ProxyFromEnvironment would send directly: inside a
// box there is nothing else to reach.
func newClient() *http.Client {
	proxy, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil || proxy.Host == "" {
		fmt.Println("demo-imp: no HTTPS_PROXY: not in a box?")
		os.Exit(1)
	}
	pool := x509.NewCertPool()
	if pem, err := os.ReadFile(os.Getenv("SSL_CERT_FILE")); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

func fetch(c *http.Client, u string) (string, string) {
	resp, err := c.Get(u)
	if err != nil {
		return "error: " + err.Error(), ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	return resp.Status, string(b)
}

// control calls the gateway's control API with the run's token.
func control(method, path string, body any) string {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, os.Getenv("IMPYARD_GATEWAY")+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+os.Getenv("IMPYARD_TOKEN"))
	req.Header.Set("Content-Type", "application/json")
	// The control API is the gateway itself: no proxy in between.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(out))
}

func note(text string) {
	fmt.Printf("demo-imp: journal note: %s\n", control("POST", "/v1/journal", map[string]string{"note": text}))
}
