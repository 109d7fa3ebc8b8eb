package config

import "time"

// Defaults of the [gateway] limits: what one box may make the gateway
// hold or record.
const (
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultBodyBudget      = 64 << 20
	DefaultNotesPerRun     = 100
	DefaultNoteBytesPerRun = 512 << 10
)

func (o *Org) gatewayDefaults() {
	g := &o.Gateway
	if g.HeaderTimeout.Duration == 0 {
		g.HeaderTimeout.Duration = DefaultHeaderTimeout
	}
	if g.BodyBudget == 0 {
		g.BodyBudget = DefaultBodyBudget
	}
	if g.NotesPerRun == 0 {
		g.NotesPerRun = DefaultNotesPerRun
	}
	if g.NoteBytesPerRun == 0 {
		g.NoteBytesPerRun = DefaultNoteBytesPerRun
	}
}

// checkGateway refuses limits that would not bound anything.
func (o *Org) checkGateway(p string, b []byte) error {
	g := &o.Gateway
	switch {
	case g.BodyBudget < 0:
		return bad(p, b, "body_budget", "must be positive")
	case g.NotesPerRun < 0:
		return bad(p, b, "notes_per_run", "must be positive")
	case g.NoteBytesPerRun < 0:
		return bad(p, b, "note_bytes_per_run", "must be positive")
	}
	return nil
}
