// Command modproxy writes modules into a file-based Go module proxy, the
// layout GOPROXY=file://DIR serves:
//
//	DIR/<escaped module path>/@v/list
//	DIR/<escaped module path>/@v/<version>.info
//	DIR/<escaped module path>/@v/<version>.mod
//	DIR/<escaped module path>/@v/<version>.zip
//
// Usage:
//
//	modproxy -out DIR -version v0.1.0 [-time 2006-01-02T15:04:05Z] MODULEDIR...
//
// Each MODULEDIR holds a go.mod; its module path is read from there, and
// its zip is made with golang.org/x/mod/zip exactly as the go command and
// proxy.golang.org make them (nested modules and vendor directories left
// out, file names checked). scripts/release-check.sh serves a git archive of
// HEAD this way, so that a scratch module can go get and go install the
// repository's modules as a user would once they are tagged.
//
// It is a module of its own (golang.org/x/mod never reaches the library's
// importers) and outside go.work: run it with GOWORK=off.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "proxy directory to write into (created if missing)")
	version := flag.String("version", "", "version of every module, e.g. v0.1.0")
	stamp := flag.String("time", "", "commit time for the .info files (RFC 3339; default now)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: modproxy -out DIR -version VERSION [-time RFC3339] MODULEDIR...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *version == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	t := time.Now().UTC()
	if *stamp != "" {
		var err error
		if t, err = time.Parse(time.RFC3339, *stamp); err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: -time: %v\n", err)
			os.Exit(2)
		}
	}
	for _, dir := range flag.Args() {
		if err := add(*out, dir, *version, t.UTC()); err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
}

// add writes the module in dir at version into the proxy directory out.
func add(out, dir, version string, t time.Time) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version (vMAJOR.MINOR.PATCH)", version)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	path := modfile.ModulePath(gomod)
	if path == "" {
		return errors.New("go.mod has no module line")
	}
	mv := module.Version{Path: path, Version: version}
	if err := module.Check(path, version); err != nil {
		return err
	}
	esc, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}

	zf, err := os.Create(filepath.Join(vdir, version+".zip"))
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(zf, mv, dir); err != nil {
		_ = zf.Close()
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(vdir, version+".info"), info, 0o644); err != nil {
		return err
	}

	// list: every version the proxy serves for this module, one a line.
	listFile := filepath.Join(vdir, "list")
	old, err := os.ReadFile(listFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	if err := os.WriteFile(listFile, []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return err
	}

	st, err := os.Stat(filepath.Join(vdir, version+".zip"))
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s: %s (%d bytes)\n", path, version, filepath.Join(esc, "@v", version+".zip"), st.Size())
	return nil
}
