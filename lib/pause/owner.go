package pause

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/temporary"
	"github.com/impyard/impyard/lib/yard"
)

// Daemons are the daemons that apply a pause and acknowledge it, each
// known to be running by its lock runs/.<daemon>.lock.
var Daemons = []string{"impsup", "impgw"}

// ErrUnknownImp refuses a pause of an imp the yard has no imps/<imp>/ for:
// most likely a typo, which would otherwise pause nothing that runs.
var ErrUnknownImp = errors.New("no such imp")

// ErrNotTaken means a running daemon did not acknowledge a pause or resume
// in time: it is written, and the daemon applies it when it reads it.
var ErrNotTaken = temporary.New("not acknowledged in time")

// Result is what Set did.
type Result struct {
	State *State `json:"state"`
	// Running are the daemons that were running and so had to take it;
	// Took are those that acknowledged it.
	Running []string `json:"running"`
	Took    []string `json:"took"`
}

// Set pauses (resume false) or resumes what c names, records it in the
// journal of every imp it concerns and in the audit log with who and why,
// enqueues its notification, and waits up to timeout for every running
// daemon to acknowledge it. A daemon that does not is named in an error
// wrapping ErrNotTaken; the change stays written.
func Set(ctx context.Context, y *yard.Yard, resume bool, c Change, timeout time.Duration) (*Result, error) {
	if c.At.IsZero() {
		c.At = time.Now()
	}
	var running []string
	for _, d := range Daemons {
		up, err := run.DaemonUp(y, d)
		if err != nil {
			return nil, err
		}
		if up {
			running = append(running, d)
		}
	}
	if !resume && len(c.Imps) > 0 {
		known, err := config.ImpNames(y)
		if err != nil {
			return nil, err
		}
		for _, imp := range c.Imps {
			if !slices.Contains(known, imp) {
				return nil, fmt.Errorf("%w: %s (no %s)", ErrUnknownImp, imp, config.ImpPath(y, imp))
			}
		}
	}
	change, name := Pause, notify.Pause
	if resume {
		change, name = Resume, notify.Resume
	}
	s, err := change(y, c)
	if err != nil {
		return nil, err
	}
	imps := c.Imps
	if len(imps) == 0 {
		if imps, err = config.ImpNames(y); err != nil {
			return nil, err
		}
	}
	why := c.Reason
	if resume {
		why = ""
	}
	e := event.Event{Event: name, Actor: "impsup", By: c.By, ID: notify.PauseSubject, Seq: s.Seq, Why: why, TS: c.At}
	var errs []error
	for _, imp := range imps {
		e.Imp = imp
		if err := event.Record(y, e); err != nil {
			errs = append(errs, err)
		}
	}
	e.Imp = ""
	if len(c.Imps) == 1 {
		e.Imp = c.Imps[0]
	}
	if err := notify.Enqueue(y, e, config.Notifies); err != nil {
		errs = append(errs, err)
	}
	res := &Result{State: s, Running: running, Took: []string{}}
	if res.Running == nil {
		res.Running = []string{}
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	missing := Wait(wctx, y, running, s.Seq)
	for _, d := range running {
		if !slices.Contains(missing, d) {
			res.Took = append(res.Took, d)
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("%s %d written, but not all recorded: %w", name, s.Seq, errors.Join(errs...))
	}
	if len(missing) > 0 {
		return res, fmt.Errorf("%s %d written (%s), but %v did not acknowledge it within %s: %w", name, s.Seq, Path(y), missing, timeout, ErrNotTaken)
	}
	return res, nil
}
