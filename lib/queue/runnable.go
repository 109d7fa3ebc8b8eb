package queue

import (
	"errors"
	"fmt"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard"
)

// ErrNotRunnable is a task that no box could run as it stands: its imp
// has no imps/<imp>/imp.toml, or it is a code task with no repository.
var ErrNotRunnable = errors.New("would never run")

// Runnable checks, before a task is queued, that a box could run it: its
// imp has a configuration, and a code task has a repository (its own or
// its imp's repo). A task that fails the check would only wait, or fail
// when its box starts. The error wraps ErrNotRunnable and names what is
// missing; a configuration that exists but does not load is returned as
// it is.
func Runnable(y *yard.Yard, o AddOptions) error {
	cfg, err := config.LoadImp(y, o.Imp)
	if errors.Is(err, config.ErrNoImpConfig) {
		return fmt.Errorf("task %w: %v", ErrNotRunnable, err)
	}
	if err != nil {
		return err
	}
	if o.Kind == Code && o.Repo == "" && cfg.Repo == "" {
		return fmt.Errorf("task %w: a code task needs a repository, and neither it nor %s/imp.toml names one (repo)", ErrNotRunnable, cfg.Dir)
	}
	return nil
}
