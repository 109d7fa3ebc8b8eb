package supervisor

import (
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/temporary"
)

// The supervisor's failures that trying again later can cure; a command
// exits 111 on them.
var (
	// ErrRunning means another live supervisor holds the yard's
	// supervisor lock (runs/.impsup.lock).
	ErrRunning = temporary.New("another impsup is running")
	// ErrGatewayDown means impgw does not answer, so no box is started:
	// the task stays waiting.
	ErrGatewayDown = health.ErrGatewayDown
)
