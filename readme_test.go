package slidelog_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's quick start is a whole program that compiles as copied, and
// its functions are those of example_quickstart_test.go, which runs them.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## Quick start")
	_, rest, ok2 := strings.Cut(rest, "```go\n")
	program, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no Go block under ## Quick start")
	}
	example, err := os.ReadFile("example_quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, quoted, _ := strings.Cut(string(example), "// quickstart begin\n")
	quoted, _, _ = strings.Cut(quoted, "// quickstart end")
	if quoted = strings.TrimSpace(quoted); quoted == "" || !strings.Contains(program, quoted) {
		t.Fatal("the README's quick start does not hold example_quickstart_test.go's quickstart lines as they are")
	}
	// a directory of this module (its go.mod resolves the imports); the
	// go tool's ./... patterns skip names that start with _, and git
	// ignores it (.gitignore), so that no other test sees the tree change
	dir, err := os.MkdirTemp(".", "_readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's quick start does not compile: %v\n%s", err, out)
	}
}
