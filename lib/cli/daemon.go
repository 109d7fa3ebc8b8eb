package cli

import (
	"context"

	"github.com/impyard/impyard/lib/sdnotify"
)

// Ready tells systemd, in a Type=notify unit, that the daemon serves; a
// notice that cannot be sent is a warning. Outside systemd it does
// nothing.
func (e *Env) Ready() {
	if _, err := sdnotify.Send(sdnotify.Ready); err != nil {
		e.Warn(err)
	}
}

// StoppingOn logs "stopping" and tells systemd the daemon is stopping as
// soon as ctx ends (SIGTERM, SIGINT); the returned func withdraws both
// for a daemon that ends otherwise.
func (e *Env) StoppingOn(ctx context.Context) func() {
	return sdnotify.StoppingOn(ctx, func(err error) { e.Warn(err) }, func() { e.Logf("stopping") })
}
