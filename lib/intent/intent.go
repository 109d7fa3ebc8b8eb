// Package intent names the intents that more than one process agrees on
// and owns the payloads whose shape is fixed by code rather than by
// org.toml: the commit-and-push gate the supervisor files for a code
// task's commits, which impgate shows and impexec pushes, and the pull
// request a push chains (the intent a git-push executor's then names), and
// the memory entry an imp proposes for its core memory. A payload's JSON
// field names are declared here
// once, as the struct's tags and as the Fields that org.toml's trust
// entries are checked against, so the process that files a gate and the
// ones that read it cannot drift apart.
package intent

import "github.com/impyard/impyard/lib/payload"

// Intent names used by several packages.
const (
	// EgressGrant is the built-in intent by which an imp proposes the
	// egress rule it needs; it is typed even without an executor.
	EgressGrant = "egress-grant"
	// CommitAndPush is the intent of the gate a code task's new commits
	// file; its payload is a Push.
	CommitAndPush = "commit-and-push"
	// MessageUser is a note to the owner: the executor kind that writes
	// it, and the intent such an executor is conventionally configured
	// under ([executors.message-user]).
	MessageUser = "message-user"
	// MemoryPromote is the intent by which an imp proposes an entry for
	// its core memory (imps/<imp>/memory.md), conventionally configured as
	// [executors.memory-promote] with kind "memory"; its payload is a
	// Memory.
	MemoryPromote = "memory-promote"
	// TrustPromote is the gate impexec files when an imp has earned an
	// auto trust entry for an intent ([[earn]] in org.toml); its payload
	// is the entry, approved into imps/<imp>/imp.toml. Only the trusted
	// side files it: a box proposing it is refused.
	TrustPromote = "trust-promote"
)

// Push is the frozen payload of a commit-and-push gate: the branch to
// push, the base it was cut from and the head that was reviewed (full
// commit shas), the reviewed diff as a blob reference ("sha256:<hex>")
// and its stat.
type Push struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	Base   string `json:"base"`
	Head   string `json:"head"`
	Diff   string `json:"diff"`
	Stat   string `json:"stat"`
}

// PushFields types Push's fields for trust entries.
var PushFields = payload.Fields{"repo": payload.Text, "branch": payload.Text, "base": payload.Text,
	"head": payload.Text, "diff": payload.Text, "stat": payload.Text}

// PullRequest is the payload of the gate a git-push executor files after
// a push, unless that executor declares its own fields.
type PullRequest struct {
	Title string `json:"title"`
	Head  string `json:"head"`
	Base  string `json:"base"`
	Body  string `json:"body"`
}

// PullRequestFields types PullRequest's fields for trust entries.
var PullRequestFields = payload.Fields{"title": payload.Text, "head": payload.Text, "base": payload.Text, "body": payload.Text}

// Memory is the payload of a memory-promote gate: the entry's text, why
// the imp wants it kept, and, to replace an entry rather than add one, the
// id (e-…) of the entry it replaces.
type Memory struct {
	Text     string `json:"text"`
	Reason   string `json:"reason"`
	Replaces string `json:"replaces,omitempty"`
}

// MemoryFields types Memory's fields for trust entries.
var MemoryFields = payload.Fields{"text": payload.Text, "reason": payload.Text, "replaces": payload.Text}
