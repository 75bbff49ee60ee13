package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// slidelog version and --version print the module's version and its VCS
// revision from the build information, or from the commit the builder
// named (-X), which replaces the go command's.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errs := runDone(args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "slidelog ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and one line", args, code, out, errs)
		}
	}
	bi := &debug.BuildInfo{
		GoVersion: "go1.24.4",
		Main:      debug.Module{Path: "github.com/slidelog/slidelog/cmd/slidelog", Version: "v0.1.0"},
		Deps:      []*debug.Module{{Path: "github.com/slidelog/slidelog", Version: "v0.1.0"}},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-30T04:21:55Z"}, {Key: "vcs.modified", Value: "true"}},
	}
	devel := &debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}}}
	const other = "fedcba9876543210fedcba9876543210fedcba98"
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{bi, "slidelog v0.1.0 (revision 0123456789ab, 2026-11-30T04:21:55Z, modified), library v0.1.0, go1.24.4"},
		{devel, "slidelog (devel) (revision unknown), library unknown, go1.25.0"},
		{&debug.BuildInfo{GoVersion: "go1.25.0", Main: debug.Module{Version: ""},
			Deps: []*debug.Module{{Path: "github.com/slidelog/slidelog", Version: "v0.1.0", Replace: &debug.Module{Path: "../", Version: ""}}}},
			"slidelog (devel) (revision unknown), library v0.1.0 => ../, go1.25.0"},
		{nil, "slidelog (devel) (revision unknown: no build information)"},
		{stamped(devel, other, "2026-12-01T10:00:00Z", "false"), "slidelog (devel) (revision fedcba987654, 2026-12-01T10:00:00Z), library unknown, go1.25.0"},
		{stamped(bi, other, "2026-12-01T10:00:00Z", "false"), "slidelog v0.1.0 (revision fedcba987654, 2026-12-01T10:00:00Z), library v0.1.0, go1.24.4"},
		{stamped(devel, other, "", "true"), "slidelog (devel) (revision fedcba987654, modified), library unknown, go1.25.0"},
		{stamped(bi, "", "", ""), "slidelog v0.1.0 (revision 0123456789ab, 2026-11-30T04:21:55Z, modified), library v0.1.0, go1.24.4"},
	} {
		if got := versionLine(c.bi); got != c.want {
			t.Errorf("versionLine:\n got %q\nwant %q", got, c.want)
		}
	}
	if s := stamped(bi, other, "", "false"); len(s.Settings) != 4 || s.Settings[3].Key != "-trimpath" || bi.Settings[2].Value != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("stamped: settings %v (want the stamp's 3 and -trimpath), the build's own %v (want them unchanged)", s.Settings, bi.Settings)
	}
}

// A binary built from a git checkout names the commit it was built from
// (git rev-parse HEAD), with its commit time, and says "modified" exactly
// when git status --porcelain lists anything (as the go command tells it):
// built by go build (the go command's own stamp: in a clone, whose .git is
// a directory), with the commit given by -ldflags -X (the go command's stamp
// off, as -buildvcs=false or a tree without its .git leave it), and by
// scripts/build-cli.sh, which builds the image's binary.
func TestVersionNamesTheCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git here: nothing names the commit to compare with")
	}
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	if exec.Command("git", "rev-parse", "--git-dir").Run() != nil {
		t.Skip("not in a git checkout (the sources without their .git): nothing names the commit")
	}
	root := git("rev-parse", "--show-toplevel")
	head := git("rev-parse", "HEAD")
	ct, err := strconv.ParseInt(git("log", "-1", "--format=%ct", "HEAD"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(ct, 0).UTC().Format(time.RFC3339)
	modified := git("status", "--porcelain") != ""
	// The tree's state, once more after the builds: a file changed while
	// they ran (an editor's save) changes what a build may say.
	check := func(t *testing.T, bin string) {
		t.Helper()
		out, err := exec.Command(bin, "version").CombinedOutput()
		line := strings.TrimSpace(string(out))
		want := "(revision " + head[:12] + ", " + at
		if modified {
			want += ", modified)"
		} else {
			want += ")"
		}
		if err != nil || !strings.HasPrefix(line, "slidelog ") || !strings.Contains(line, want) {
			t.Errorf("version: %v, %q; want %q in it (HEAD %s)", err, line, want, head)
		}
		if now := git("status", "--porcelain") != ""; now != modified {
			t.Fatalf("the tree changed during the test (modified %v, then %v): run it again", modified, now)
		}
	}
	build := func(t *testing.T, args ...string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "slidelog")
		cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", bin, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return bin
	}

	t.Run("go build", func(t *testing.T) {
		// -buildvcs=auto is go build's default, spelled out so that a
		// GOFLAGS=-buildvcs=false of the environment does not change what
		// is tested.
		if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
			t.Skipf("%s/.git is not a directory (a linked git worktree's is a file, which the go command does not recognise: it stamps no commit there, golang.org/issue/58218); the other subtests name the commit with -X", root)
		}
		check(t, build(t, "-buildvcs=auto"))
	})
	t.Run("go build -ldflags -X", func(t *testing.T) {
		m := strconv.FormatBool(modified)
		check(t, build(t, "-buildvcs=false", "-ldflags",
			"-X main.revision="+head+" -X main.revisionTime="+at+" -X main.revisionModified="+m))
	})
	t.Run("scripts/build-cli.sh", func(t *testing.T) {
		if _, err := exec.LookPath("bash"); err != nil {
			t.Skip("no bash here to run the script")
		}
		bin := filepath.Join(t.TempDir(), "slidelog")
		// -buildvcs=false: the binary names its commit without the go
		// command's stamp, as one built from a tree without its .git would
		// have to.
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-cli.sh"), bin, "-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/build-cli.sh: %v\n%s", err, out)
		}
		check(t, bin)
	})
}
