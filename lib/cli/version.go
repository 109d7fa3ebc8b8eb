package cli

import (
	"fmt"
	"runtime/debug"
)

// Version is the line --version prints: the program, the module version
// and the VCS revision it was built from, "(devel)" and "unknown" when the
// build did not record them (go run, a test binary).
func Version(name string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return versionLine(name, nil)
	}
	return versionLine(name, info)
}

func versionLine(name string, info *debug.BuildInfo) string {
	version, revision, modified := "(devel)", "unknown", false
	if info != nil {
		if v := info.Main.Version; v != "" {
			version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if s.Value != "" {
					revision = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified {
		revision += ", modified"
	}
	return fmt.Sprintf("%s %s (%s)", name, version, revision)
}
