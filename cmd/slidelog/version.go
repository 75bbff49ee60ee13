package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// libraryPath is the module of the library the command is built with.
const libraryPath = "github.com/slidelog/slidelog"

// versionLine describes the build bi (debug.ReadBuildInfo's; nil when the
// binary has none) in one line: the command's module version ("(devel)"
// when built from a work tree without one), its VCS revision (12 digits),
// commit time and whether the tree was modified, the library's version
// (and what replaced it), and the Go it was built with.
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "slidelog (devel) (revision unknown: no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var vcs []string
	switch {
	case rev == "":
		vcs = append(vcs, "revision unknown")
	case len(rev) > 12:
		vcs = append(vcs, "revision "+rev[:12])
	default:
		vcs = append(vcs, "revision "+rev)
	}
	if at != "" {
		vcs = append(vcs, at)
	}
	if modified {
		vcs = append(vcs, "modified")
	}
	library := "unknown"
	for _, d := range bi.Deps {
		if d.Path != libraryPath {
			continue
		}
		library = d.Version
		if library == "" {
			library = "(devel)"
		}
		if r := d.Replace; r != nil {
			library += " => " + r.Path
			if r.Version != "" {
				library += " " + r.Version
			}
		}
	}
	return fmt.Sprintf("slidelog %s (%s), library %s, %s", version, strings.Join(vcs, ", "), library, bi.GoVersion)
}

// buildVersion is versionLine of this binary's build information.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionLine(bi)
}
