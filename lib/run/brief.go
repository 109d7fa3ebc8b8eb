package run

import (
	"encoding/json"
	"fmt"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// The brief is runs/<run-id>/brief.json: the supervisor writes it (see
// lib/supervisor's Brief) and the box reads it at start.
const (
	BriefFile  = "brief.json"
	BriefKind  = "brief"
	BriefMajor = 1
)

// BriefMessages returns the ids of the owner's messages runID's brief
// carries: those its box knows from the start. A run without a brief
// carries none.
func BriefMessages(y *yard.Yard, runID string) ([]string, error) {
	p := Path(y, runID, BriefFile)
	b, err := store.ReadFile(p)
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := store.CheckSchema(p, b, BriefKind, BriefMajor); err != nil {
		return nil, err
	}
	// Only the mailbox matters here; the rest is the supervisor's to check.
	var brief struct {
		Mailbox []struct {
			ID string `json:"id"`
		} `json:"mailbox"`
	}
	if err := json.Unmarshal(b, &brief); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var out []string
	for _, m := range brief.Mailbox {
		out = append(out, m.ID)
	}
	return out, nil
}
