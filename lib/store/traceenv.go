package store

// TraceEnv names the file a crash-enabled build appends its trace to: one
// JSON object per operation (TraceRecord), one write(2) each, so the
// operations of several processes, and the marks a test adds between
// them, interleave whole and in the order they happened. Only a binary
// built with the impyard_crash tag honours it: the trace holds the bytes
// of every file written, keys included, and is for the crash-state
// harness alone.
const TraceEnv = "IMPYARD_STORE_TRACE"
