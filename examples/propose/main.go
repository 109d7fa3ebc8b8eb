// Command propose files one proposal from inside a box: it POSTs the
// envelope {intent, payload, rationale, run_id, task_id} to the gateway's
// /v1/actions with the run's token, prints the gateway's answer and exits
// 0 when the proposal was taken (pending or done), 1 when it was refused,
// 2 on a usage mistake and 111 when the gateway could not be reached. It
// is the one way an agent CLI in a box acts on the world: the agent runs
// it as a shell command, and a human (or a trust rule) decides.
//
//	propose INTENT PAYLOAD-JSON [RATIONALE]
//
// For example:
//
//	propose email-send '{"to":["team@ourco.com"],"subject":"Hi","body":"..."}' 'the task asked for it'
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

const usage = `usage: propose INTENT PAYLOAD-JSON [RATIONALE]

Files a proposal with the gateway's /v1/actions (IMPYARD_GATEWAY, with
IMPYARD_TOKEN) for a human or a trust rule to decide; prints the answer:
{"status":"pending","gate_id":...} or {"status":"done",...}.

Example:
  propose email-send '{"to":["team@ourco.com"],"subject":"Hi","body":"hello"}' 'the task asked for it'
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) < 2 || len(args) > 3 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if !json.Valid([]byte(args[1])) {
		fmt.Fprintf(stderr, "propose: error: the payload is not JSON: %s\n", args[1])
		return 2
	}
	gateway, token := os.Getenv("IMPYARD_GATEWAY"), os.Getenv("IMPYARD_TOKEN")
	if gateway == "" || token == "" {
		fmt.Fprintln(stderr, "propose: error: IMPYARD_GATEWAY and IMPYARD_TOKEN are not set: not in a box?")
		return 1
	}
	env := map[string]any{
		"intent": args[0], "payload": json.RawMessage(args[1]),
		"run_id": os.Getenv("IMPYARD_RUN"), "task_id": os.Getenv("IMPYARD_TASK"),
	}
	if len(args) == 3 {
		env["rationale"] = args[2]
	}
	body, err := json.Marshal(env)
	if err != nil {
		fmt.Fprintf(stderr, "propose: error: %v\n", err)
		return 1
	}
	req, err := http.NewRequest("POST", strings.TrimSuffix(gateway, "/")+"/v1/actions", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "propose: error: IMPYARD_GATEWAY %s: %v\n", gateway, err)
		return 1
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	// The control API is the gateway itself: no proxy in between.
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "propose: error: %v\n", err)
		return 111
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(out))
	switch {
	case resp.StatusCode < 300:
		return 0
	case resp.StatusCode >= 500:
		fmt.Fprintf(stderr, "propose: error: the gateway answered %s\n", resp.Status)
		return 111
	default:
		fmt.Fprintf(stderr, "propose: error: %s refused: %s\n", args[0], resp.Status)
		return 1
	}
}
