package earn

import (
	"encoding/json"
	"fmt"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Propose files the trust-promote gate of (imp, in) when it is due: the
// (imp, in) has an [[earn]] entry, no trust-promote gate of it waits for
// the owner, and its streak has reached the entry's after. It returns the
// gate filed, or nil when none is due. The count and the filing are one
// transaction under the lock of gates/.earn/, so two executors finishing
// two gates at once file one promotion, not two.
func Propose(y *yard.Yard, org *config.Org, imp, in string) (*gate.Gate, error) {
	want := org.EarnFor(imp, in)
	if want == nil || in == intent.TrustPromote {
		return nil, nil
	}
	d, err := gate.EarnDir(y)
	if err != nil {
		return nil, err
	}
	var filed *gate.Gate
	err = d.Update(func(*store.Tx) error {
		streak, waiting, err := Streak(y, imp, in)
		if err != nil || waiting != nil || len(streak) < want.After {
			return err
		}
		streak = streak[len(streak)-want.After:]
		e, err := Narrowest(org, in, streak)
		if err != nil {
			return fmt.Errorf("%s %s earned promotion after %d approvals, but: %w", imp, in, want.After, err)
		}
		body, err := json.Marshal(e)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("%d consecutive approvals of %s by the owner, no deny between them: this auto entry covers them", want.After, in)
		filed, err = gate.File(y, gate.FileOptions{Imp: imp, Intent: intent.TrustPromote, Payload: body,
			Rationale: why, By: Actor, Actor: Actor,
			Trust: &gate.Trust{Level: config.Gate, Why: "a trust-promote gate always waits for the owner"}})
		return err
	})
	return filed, err
}

// ProposeAll runs Propose for every [[earn]] entry, so a promotion a
// crash kept from being filed is filed at the next pass. It returns the
// gates filed and the errors met, one per entry.
func ProposeAll(y *yard.Yard, org *config.Org) (filed []*gate.Gate, errs []error) {
	for _, e := range org.Earn {
		g, err := Propose(y, org, e.Imp, e.Intent)
		if err != nil {
			errs = append(errs, err)
		}
		if g != nil {
			filed = append(filed, g)
		}
	}
	return filed, errs
}
