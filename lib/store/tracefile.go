//go:build impyard_crash

package store

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// TraceRecord is one line of a trace file: an Op, the process that
// performed it, or, with Mark set, a mark a test wrote (an effect outside
// the yard, such as a request an upstream received).
type TraceRecord struct {
	Pid  int    `json:"pid,omitempty"`
	Kind OpKind `json:"op,omitempty"`
	Path string `json:"path,omitempty"`
	To   string `json:"to,omitempty"`
	Off  int64  `json:"off,omitempty"`
	Data []byte `json:"data,omitempty"`
	Mark string `json:"mark,omitempty"`
}

func init() {
	p := os.Getenv(TraceEnv)
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", TraceEnv, err)
		os.Exit(111)
	}
	var mu sync.Mutex
	pid := os.Getpid()
	SetTrace(func(op Op) {
		line, err := json.Marshal(TraceRecord{Pid: pid, Kind: op.Kind, Path: op.Path, To: op.To, Off: op.Off, Data: op.Data})
		if err != nil {
			panic(err)
		}
		mu.Lock()
		defer mu.Unlock()
		// A trace that cannot be written would make the harness check
		// states that never were: stop rather than go on untraced.
		if _, err := f.Write(append(line, '\n')); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", TraceEnv, err)
			os.Exit(111)
		}
	})
}
