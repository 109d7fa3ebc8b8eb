package executor

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/yard"
)

// Destination is where an approved gate's payload will go, as its
// executor would send it: what the desk shows before anyone approves.
type Destination struct {
	Kind   string `json:"kind"`
	Method string `json:"method,omitempty"` // http
	URL    string `json:"url,omitempty"`    // http
	// Repo, Remote and Branch are a push's: the task's repository, the
	// imp's remote (imp.toml remote, "" when it sets none) and the ref.
	Repo    string   `json:"repo,omitempty"`
	Remote  string   `json:"remote,omitempty"`
	Branch  string   `json:"branch,omitempty"`
	Then    string   `json:"then,omitempty"`    // the gate filed after a push
	Log     string   `json:"log,omitempty"`     // message-user: the file appended to
	Command []string `json:"command,omitempty"` // message-user: run after
	Policy  string   `json:"policy,omitempty"`  // egress-grant: the policy changed
	Memory  string   `json:"memory,omitempty"`  // memory: the file kept in
	Config  string   `json:"config,omitempty"`  // trust-promote: the imp.toml appended to
}

// String says in one line where the payload goes.
func (d *Destination) String() string {
	switch d.Kind {
	case config.HTTP:
		return fmt.Sprintf("%s %s %s (through impgw, as org)", d.Kind, d.Method, d.URL)
	case config.GitPush:
		remote := d.Remote
		if remote == "" {
			remote = "(no remote set in imp.toml: the push would fail)"
		}
		s := fmt.Sprintf("%s %s to %s", d.Kind, d.Branch, remote)
		if d.Repo != "" {
			s += " from " + d.Repo
		}
		if d.Then != "" {
			s += ", then a gate for " + d.Then
		}
		return s
	case config.MessageUser:
		s := d.Kind + " appended to " + d.Log
		if len(d.Command) > 0 {
			s += ", then " + strings.Join(d.Command, " ")
		}
		return s
	case config.EgressGrant:
		return d.Kind + " a rule added to " + d.Policy
	case config.Memory:
		return d.Kind + " an entry kept in " + d.Memory
	case config.TrustPromote:
		return d.Kind + " an earned [[trust]] entry appended to " + d.Config
	}
	return d.Kind
}

// Where returns where g's payload would go if it were executed now with
// org's executors: the executor's kind and, by kind, its method and URL,
// the branch and remote of a push, the log of a message or the policy of
// a grant. An intent with no executor, or a push the executor would
// refuse (a branch outside imp/<imp>/, a payload that is not a push), is
// an error saying so.
func Where(y *yard.Yard, org *config.Org, g *gate.Gate) (*Destination, error) {
	exe := executorFor(org, g.Intent)
	if exe == nil {
		_, err := org.Executor(g.Intent)
		return nil, err
	}
	d := &Destination{Kind: exe.Kind}
	switch exe.Kind {
	case config.HTTP:
		d.Method, d.URL = exe.Method, exe.URL
	case config.MessageUser:
		d.Log, d.Command = noticeLog(y, exe), exe.Command
	case config.EgressGrant:
		d.Policy = y.PolicyPath()
	case config.Memory:
		d.Memory = config.MemoryPath(y, g.Imp)
	case config.TrustPromote:
		d.Config = config.ImpPath(y, g.Imp)
	case config.GitPush:
		var p intent.Push
		if err := json.Unmarshal(g.Payload, &p); err != nil {
			return nil, fmt.Errorf("a %s payload: %w", exe.Kind, err)
		}
		branch, err := pushBranch(g.Imp, p.Branch)
		if err != nil {
			return nil, err
		}
		d.Repo, d.Branch, d.Then = p.Repo, "refs/heads/"+branch, exe.Then
		imp, err := config.LoadImp(y, g.Imp)
		if err != nil {
			return nil, err
		}
		d.Remote = imp.Remote
	}
	return d, nil
}
