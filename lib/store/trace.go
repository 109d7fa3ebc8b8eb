package store

import "sync/atomic"

// The trace hook is the store's one seam for seeing what it does to the
// disk: every operation that changes a file or directory, or makes a
// change durable, is reported to the hook, in the order it happened, after
// it succeeded. With no hook set (every program) reporting costs one
// atomic load. A test sets one to check the order of writes and syncs
// (that a new directory is synced into its parent before a file in it is
// acknowledged, say); a crash-state harness records the operations and
// replays every state a power cut could leave.
//
// Paths are absolute (the root joined with what lies below it), so the
// reader can tell which tree an operation touched. A failed operation is
// not reported: the store returns its error, and the caller treats what it
// tried as not done.

// OpKind names a kind of operation.
type OpKind string

// The operations reported. A rename, a create, a mkdir and an unlink
// change a directory, which only a DirSync of that directory makes
// durable; a Write, an Append or a Truncate changes a file's contents,
// which only an Fsync or Fdatasync of that file makes durable.
const (
	OpMkdir     OpKind = "mkdir"     // Path made, an empty directory
	OpCreate    OpKind = "create"    // Path made, an empty regular file
	OpWrite     OpKind = "write"     // Data written at Off of Path
	OpAppend    OpKind = "append"    // Data appended to Path, whose size was Off
	OpTruncate  OpKind = "truncate"  // Path cut (or grown) to Off bytes
	OpFsync     OpKind = "fsync"     // Path's data and metadata made durable
	OpFdatasync OpKind = "fdatasync" // Path's data (and its size) made durable
	OpDirSync   OpKind = "dirsync"   // the directory Path's entries made durable
	OpRename    OpKind = "rename"    // Path renamed over To
	OpUnlink    OpKind = "unlink"    // Path removed
)

// Op is one operation the store performed.
type Op struct {
	Kind OpKind
	Path string
	To   string // OpRename: the new name
	Off  int64  // OpWrite: the offset; OpAppend: the size before; OpTruncate: the size after
	// Data is what OpWrite and OpAppend wrote. It is the caller's buffer,
	// valid only during the call: a hook that keeps it copies it.
	Data []byte
}

var traceHook atomic.Pointer[func(Op)]

// SetTrace makes fn hear every operation the store performs from now on,
// in every goroutine, until restore is called (which puts back whatever
// hook was set before). fn is called synchronously by the goroutine that
// performed the operation, possibly from several at once, so it must be
// safe for concurrent use; it must not call the store.
func SetTrace(fn func(Op)) (restore func()) {
	old := traceHook.Swap(&fn)
	return func() { traceHook.Store(old) }
}

// trace reports op to the hook, if one is set.
func trace(op Op) {
	if fn := traceHook.Load(); fn != nil {
		(*fn)(op)
	}
}
