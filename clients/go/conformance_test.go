package fenecdb

// TestConformance is the shared suite's entry (conformance.md Part C): the builder vectors of
// FENEC_VECTORS, then the worker scenarios of FENEC_SCENARIOS against FENEC_URL, then the worker under the
// docs' policy against FENEC_POLICY_URL (policy_test.go), then, when FENEC_REPLICA_SCENARIOS is set, the
// replica cases against FENEC_PRIMARY_URL and FENEC_REPLICA_URL (replica_scenarios_test.go), then exactly one summary
// line `go: N passed, M failed` on standard output. conformance.sh runs it so that the line reaches
// standard output unchanged.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fileFromEnv resolves a FENEC_* file: relative to the working directory when given, else the project's
// own file, found from this package's place in the tree.
func fileFromEnv(name, projectFile string) (string, bool) {
	if p := os.Getenv(name); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return p, false
		}
		return abs, false
	}
	return filepath.Join(repoRoot(), "conformance", projectFile), true
}

// picked tells whether the case name is run: FENEC_ONLY unset, or a part of the name (conformance
// README: only the cases whose name holds that text).
func picked(name string) bool {
	only := os.Getenv("FENEC_ONLY")
	return only == "" || strings.Contains(name, only)
}

func TestConformance(t *testing.T) {
	vectors, project := fileFromEnv("FENEC_VECTORS", "builder.json")
	min := 1
	if own := filepath.Join(repoRoot(), "conformance", "builder.json"); project || vectors == own {
		min = minProjectVectors
	}
	v := runVectorsFile(os.Stdout, vectors, min)
	scenarios, _ := fileFromEnv("FENEC_SCENARIOS", "worker-scenarios.json")
	s := runScenariosFile(os.Stdout, scenarios, os.Getenv("FENEC_URL"), os.Getenv("FENEC_REQUIRE_SERVER") == "1")
	pOK, pFail := runPolicyFile(os.Stdout, os.Getenv("FENEC_REQUIRE_SERVER") == "1")
	passed, failed := v.ok+v.elsewhere+s.ok+pOK, v.fail+s.fail+pFail
	if path := os.Getenv("FENEC_REPLICA_SCENARIOS"); path != "" {
		r := runReplicaScenariosFile(os.Stdout, path, os.Getenv("FENEC_PRIMARY_URL"), os.Getenv("FENEC_REPLICA_URL"))
		passed, failed = passed+r.ok, failed+r.fail
	}
	fmt.Printf("go: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		t.Fail()
	}
}
