package queue

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A task is runnable when its imp has a configuration and, for a code
// task, a repository of its own or its imp's.
func TestRunnable(t *testing.T) {
	y := yardtest.New(t)
	for name, conf := range map[string]string{
		"yuko":   "image = \"busybox\"\n",
		"rex":    "image = \"busybox\"\nrepo = \"/srv/app\"\n",
		"broken": "image = \"a\"\nrootfs = \"b\"\n",
	} {
		os.MkdirAll(y.Path("imps", name), 0o750)
		if err := os.WriteFile(y.Path("imps", name, "imp.toml"), []byte(conf), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		o       AddOptions
		want    string
		missing bool
	}{
		{o: AddOptions{Imp: "yuko"}},
		{o: AddOptions{Imp: "yuko", Kind: Research}},
		{o: AddOptions{Imp: "yuko", Kind: Code, Repo: "/srv/other"}},
		{o: AddOptions{Imp: "rex", Kind: Code}},
		{o: AddOptions{Imp: "nobody"}, want: "imp nobody has no configuration", missing: true},
		{o: AddOptions{Imp: "yuko", Kind: Code}, want: "a code task needs a repository", missing: true},
		{o: AddOptions{Imp: "broken"}, want: "set exactly one of rootfs, archive or image"},
	} {
		err := Runnable(y, tc.o)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotRunnable) != tc.missing {
			t.Errorf("%+v: %v, want %q (not runnable: %v)", tc.o, err, tc.want, tc.missing)
		}
	}
}
