package config

import (
	"strings"
	"testing"
	"time"
)

func TestGatewayLimits(t *testing.T) {
	o, err := LoadOrg(yardWith(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if g := o.Gateway; g.HeaderTimeout.Duration != DefaultHeaderTimeout || g.BodyBudget != DefaultBodyBudget ||
		g.NotesPerRun != DefaultNotesPerRun || g.NoteBytesPerRun != DefaultNoteBytesPerRun {
		t.Errorf("defaults %+v", g)
	}
	o, err = LoadOrg(yardWith(t, "[gateway]\nheader_timeout = \"3s\"\nbody_budget = 1048576\nnotes_per_run = 5\nnote_bytes_per_run = 4096\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := o.Gateway; g.HeaderTimeout.Duration != 3*time.Second || g.BodyBudget != 1<<20 || g.NotesPerRun != 5 || g.NoteBytesPerRun != 4096 {
		t.Errorf("set %+v", g)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[gateway]\nheader_timeout = \"-1s\"\n", `org.toml:2: key "gateway.header_timeout": duration must not be negative`},
		{"[gateway]\nbody_budget = -1\n", `org.toml:2: key "body_budget": must be positive`},
		{"[gateway]\nnotes_per_run = -3\n", `org.toml:2: key "notes_per_run": must be positive`},
		{"[gateway]\nnote_bytes_per_run = -3\n", `org.toml:2: key "note_bytes_per_run": must be positive`},
	} {
		if _, err := LoadOrg(yardWith(t, tc.toml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}
