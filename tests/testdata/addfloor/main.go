// Command addfloor is BenchmarkAddVsNq's floor for a durable add in Go:
// the file system work impq add cannot skip, and nothing else. It writes
// a task-sized file into DIR through DIR/.tmp (create, write, fsync,
// rename, fsync DIR) and appends a line to DIR/journal.jsonl and
// DIR/audit.jsonl: no locks, no checks, no encoding, no configuration.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	dir := os.Args[1]
	name := "t-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".json"
	tmp := filepath.Join(dir, ".tmp", name)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	check(err)
	_, err = f.Write(make([]byte, 420))
	check(err)
	check(f.Sync())
	check(f.Close())
	check(os.Rename(tmp, filepath.Join(dir, name)))
	d, err := os.Open(dir)
	check(err)
	check(d.Sync())
	check(d.Close())
	for _, log := range []string{"audit.jsonl", "journal.jsonl"} {
		f, err := os.OpenFile(filepath.Join(dir, log), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		check(err)
		_, err = f.Write(make([]byte, 200))
		check(err)
		check(f.Close())
	}
	os.Stdout.WriteString(name + "\n")
}

func check(err error) {
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
