// Package sdnotify tells systemd how a daemon is doing, the way
// sd_notify(3) does: one datagram of "KEY=VALUE" lines to the unix socket
// named by $NOTIFY_SOCKET (an abstract socket when the name starts with
// '@'). Without NOTIFY_SOCKET, as outside a Type=notify unit, nothing is
// sent and nothing fails.
package sdnotify

import (
	"context"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The states a daemon sends.
const (
	// Ready says the daemon serves: systemd lets units ordered after it
	// start, and systemctl start returns.
	Ready = "READY=1"
	// Stopping says the daemon has begun to shut down.
	Stopping = "STOPPING=1"
)

// Env is the variable systemd names the socket in.
const Env = "NOTIFY_SOCKET"

// Send sends state (one or more "KEY=VALUE" lines) to $NOTIFY_SOCKET. It
// reports whether a socket was named; an error means one was, and the
// datagram did not reach it.
func Send(state string) (bool, error) {
	name := os.Getenv(Env)
	if name == "" {
		return false, nil
	}
	if name[0] != '/' && name[0] != '@' {
		return true, fmt.Errorf("sdnotify: %s=%q is neither a path nor an abstract socket", Env, name)
	}
	// A bare socket, not package net: every command links this package
	// through lib/cli, and net would link the C resolver and the dynamic
	// loader into all of them, a cost each short-lived process pays at
	// start. unix.SockaddrUnix turns a leading '@' into the NUL byte that
	// names an abstract socket.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("sdnotify: socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte(state), 0, &unix.SockaddrUnix{Name: name}); err != nil {
		return true, fmt.Errorf("sdnotify: send to %s: %w", name, err)
	}
	return true, nil
}

// StoppingOn sends Stopping as soon as ctx ends, after calling each of
// before (to log it, say), reporting a failure to warn (if not nil). The
// returned func cancels the notice for a daemon that ends on its own, or,
// once ctx has ended, waits until it is sent: a daemon that defers it
// does not exit before systemd heard it is stopping.
func StoppingOn(ctx context.Context, warn func(error), before ...func()) (cancel func()) {
	sent := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(sent)
		for _, f := range before {
			f()
		}
		if _, err := Send(Stopping); err != nil && warn != nil {
			warn(err)
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			if !stop() {
				<-sent
			}
		})
	}
}
