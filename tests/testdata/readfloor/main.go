// Command readfloor is BenchmarkList100k's floor for a listing: the file
// system and output work a listing of DIR cannot skip, and nothing else.
// It reads DIR's names, sorts them, and copies every .json file to
// standard output: no decoding, no checks, no encoding.
package main

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	dir := os.Args[1]
	d, err := os.Open(dir)
	check(err)
	names, err := d.Readdirnames(-1)
	check(err)
	check(d.Close())
	sort.Strings(names)
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	buf := make([]byte, 64<<10)
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, n))
		check(err)
		k, err := f.Read(buf)
		check(err)
		check(f.Close())
		_, err = w.Write(buf[:k])
		check(err)
	}
	check(w.Flush())
}

func check(err error) {
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
