// Command addfloor is BenchmarkAddVsNq's floor for a durable add in Go:
// the file system work impq add cannot skip, and nothing else. It writes
// a task-sized file into DIR through DIR/.tmp (create, write, fsync,
// rename, fsync DIR) and appends a line to DIR/journal.jsonl and
// DIR/audit.jsonl: no locks, no checks, no encoding, no configuration.
//
// With -power-cut first, it also keeps what impq add keeps for a power
// cut: a 32-byte marker written over in place and synced before the file,
// each appended line synced, the marker cleared after them.
package main

import (
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	dir := os.Args[1]
	powerCut := dir == "-power-cut"
	if powerCut {
		dir = os.Args[2]
	}
	name := "t-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".json"
	tmp := filepath.Join(dir, ".tmp", name)
	var mark *os.File
	if powerCut {
		var err error
		mark, err = os.OpenFile(filepath.Join(dir, ".recording"), os.O_RDWR|os.O_CREATE, 0o600)
		check(err)
		_, err = mark.WriteAt([]byte(name[:min(len(name), 32)]), 0)
		check(err)
		check(mark.Sync())
	}
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
		if powerCut {
			check(f.Sync())
		}
		check(f.Close())
	}
	if powerCut {
		_, err = mark.WriteAt(make([]byte, 32), 0)
		check(err)
		check(mark.Close())
	}
	os.Stdout.WriteString(name + "\n")
}

func check(err error) {
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
