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
// the README's block with the path of a fresh clone (the files git tracks in clients/go, copied to a
// folder of their own, so a file the build needs but git does not hold fails here), and its main package
// runs a worker. Nothing is fetched.
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
	clone := freshClone(t)
	mod := strings.Replace(string(m[1]), "/path/to/fenecdb/clients/go", clone, 1)
	if mod == string(m[1]) {
		t.Fatal("the README's go.mod block names no clone path")
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/myworker\n\ngo 1.22\n\n" + mod,
		"main.go": `package main

import (
	"context"
	"os"
	"os/signal"
	"time"

	"fenecdb.dev/go/fenecdb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	w := &fenecdb.Worker{DB: fenecdb.New(os.Getenv("FENECDB_URL")), Queue: "jobs", Concurrency: 4,
		Backoff: func(attempts int64) time.Duration { return time.Duration(attempts) * time.Second }}
	_ = w.Run(ctx, func(ctx context.Context, j fenecdb.Job) error { return nil })
}
`,
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

// freshClone copies the files git tracks under clients/go to a new folder, as a clone would have them,
// and answers that folder's clients/go; without git, this folder itself.
func freshClone(t *testing.T) string {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "ls-files", "-z", ".").Output()
	if err != nil || len(out) == 0 {
		t.Logf("no git here (%v): the install is built from this folder", err)
		return here
	}
	dir := filepath.Join(t.TempDir(), "fenecdb", "clients", "go")
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
