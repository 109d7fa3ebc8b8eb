package queue

import "github.com/impyard/impyard/lib/yard"

// MarkPath is queue/<imp>/<name>, a dot-file another package keeps
// beside imp's tasks, in the queue's lock domain (the supervisor's .told,
// .schedule and .lastrun). Listings skip dot-files, so a mark is never
// read as a task.
func MarkPath(y *yard.Yard, imp, name string) string { return y.Path("queue", imp, name) }
