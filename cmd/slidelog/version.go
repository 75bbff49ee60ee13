package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// libraryPath is the module of the library the command is built with.
const libraryPath = "github.com/slidelog/slidelog"

// The commit a build was made from, when its builder says so with
// -ldflags '-X main.revision=... -X main.revisionTime=... -X
// main.revisionModified=true' (scripts/build-cli.sh, which builds the
// image's binary, does): for a build the go command cannot stamp itself (a
// linked git worktree, whose .git is a file it does not recognise;
// -buildvcs=false; a tree without its .git). Set, they replace the go
// command's vcs.* settings: the builder named the commit on purpose.
var (
	revision         string // the commit's full hash
	revisionTime     string // its commit time, RFC 3339 in UTC
	revisionModified string // "true": the tree differed from the commit
)

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

// stamped is bi with the commit the builder named (rev, at, modified: the
// -X variables above) in place of the go command's vcs.* settings; bi
// itself when rev is empty. A binary without build information gets what
// is known: the commit and the Go it runs on.
func stamped(bi *debug.BuildInfo, rev, at, modified string) *debug.BuildInfo {
	if rev == "" {
		return bi
	}
	out := &debug.BuildInfo{GoVersion: runtime.Version()}
	if bi != nil {
		c := *bi
		out = &c
	}
	settings := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
	if at != "" {
		settings = append(settings, debug.BuildSetting{Key: "vcs.time", Value: at})
	}
	settings = append(settings, debug.BuildSetting{Key: "vcs.modified", Value: fmt.Sprint(modified == "true")})
	for _, s := range out.Settings {
		if s.Key != "vcs" && !strings.HasPrefix(s.Key, "vcs.") {
			settings = append(settings, s)
		}
	}
	out.Settings = settings
	return out
}

// buildVersion is versionLine of this binary's build information, with
// the commit its builder named (-X) if any.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return versionLine(stamped(bi, revision, revisionTime, revisionModified))
}
