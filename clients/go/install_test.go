package fenecdb_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeInstall builds a module of a user's, made as the README's install section says: its go.mod is
// the README's block with the clone's path, and its main package calls the client. Nothing is fetched.
func TestReadmeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- go.mod -->\n```\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("the README has no go.mod block")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	mod := strings.Replace(string(m[1]), "/path/to/fenecdb/clients/go", here, 1)
	if mod == string(m[1]) {
		t.Fatal("the README's go.mod block names no clone path")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/myworker\n\ngo 1.22\n\n" + mod,
		"main.go": "package main\n\nimport \"fenecdb.dev/go/fenecdb\"\n\nfunc main() {\n" +
			"\t_ = fenecdb.New(\"http://127.0.0.1:8080\").From(\"jobs\")\n}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "myworker"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a module made as the README says does not build: %v\n%s", err, out)
	}
}
