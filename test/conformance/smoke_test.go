package conformance

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minilet/minilet/internal/cluster/clusterbin"
	"github.com/minilet/minilet/internal/cluster/clustertest"
)

// smokeTimeout bounds the smoke run's suite (ginkgo --timeout): several
// times what it takes on a loaded machine, and under go test's default
// -timeout of 10 minutes, so that a hung spec ends as a failed spec in the
// report rather than as a killed test binary.
const smokeTimeout = 8 * time.Minute

// smokeProcs is the smoke run's ginkgo processes: its specs spend most of
// their time waiting on pods, so two overlap well even on 2 cores.
const smokeProcs = 2

// TestNodeConformanceSmoke runs the upstream specs listed in smoke.txt (a
// few fast ones; the file says how they were chosen) on the embedded
// runtime, as TestNodeConformance runs them, whenever the conformance
// binaries are already cached: `make test` then covers them in minutes. It
// never builds the binaries. Unlike TestNodeConformance, the specs' results
// are its own: it fails if a listed spec fails, skips itself or does not
// run (renamed upstream, or skipped by skip.txt), or if a spec not listed
// runs.
func TestNodeConformanceSmoke(t *testing.T) {
	clustertest.SkipUnlessEnabled(t)
	names, err := readSmokeList(filepath.Join(sourceDir(), "smoke.txt"))
	if err != nil {
		t.Fatal(err)
	}
	bins, ok, err := clusterbin.ConformanceCached()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("the conformance smoke set runs only when the conformance binaries are cached, and %s is not there: `make conformance` builds them (many minutes, once per hack/conformance version and toolchain)", bins.Dir)
	}
	skip, err := readSkipList(filepath.Join(sourceDir(), "skip.txt"))
	if err != nil {
		t.Fatal(err)
	}
	reportDir, kept := os.Getenv(EnvReportDir), true
	if reportDir == "" {
		reportDir, kept = t.TempDir(), false
	}
	run := suiteRun{
		runtime: "embedded", focus: smokeFocus(names), skip: skip,
		procs: smokeProcs, timeout: smokeTimeout, reportDir: reportDir,
		note: fmt.Sprintf("smoke set: the %d specs of test/conformance/smoke.txt", len(names)),
	}
	start := time.Now()
	specs, sum := run.run(t, bins)
	t.Logf("smoke set: %s in %s (registry, control plane, node and suite)", sum, time.Since(start).Round(time.Second))

	problems := checkSmoke(names, specs)
	for _, p := range problems {
		t.Error(p)
	}
	for _, s := range specs {
		if s.Result == Failed && !s.Suite {
			t.Logf("%s failed after %.1fs:\n%s", s.Name, s.Seconds, s.Failure)
		}
	}
	if len(problems) > 0 && !kept {
		t.Logf("the report, e2e.log and node.log were in a temporary directory: set %s=DIR to keep them", EnvReportDir)
	}
}

// readSmokeList reads smoke.txt: one exact spec name a line; lines
// starting with # and blank lines are ignored.
func readSmokeList(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	var names []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[It] "):
			return nil, fmt.Errorf("%s:%d: %q: write the spec's name without ginkgo's \"[It] \"", path, n, line)
		case slices.Contains(names, line):
			return nil, fmt.Errorf("%s:%d: spec %q is listed twice", path, n, line)
		default:
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s lists no spec", path)
	}
	return names, nil
}

// smokeFocus is the ginkgo focus that selects exactly the specs names.
// Ginkgo matches a focus against the suite's description, a space and the
// spec's full name, so each name is anchored by that space and the end.
func smokeFocus(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return " (" + strings.Join(quoted, "|") + ")$"
}

// checkSmoke compares a run's specs with the smoke list and says what is
// wrong: a listed spec that failed, skipped itself or did not run, and a
// spec that ran without being listed.
func checkSmoke(names []string, specs []Spec) []string {
	byName := make(map[string]Spec, len(specs))
	for _, s := range specs {
		byName[s.Name] = s
	}
	var problems []string
	for _, n := range names {
		s, ok := byName[n]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("smoke spec %q is not in the suite's report: renamed or removed upstream? (fix test/conformance/smoke.txt)", n))
		case s.Result == NotRun:
			problems = append(problems, fmt.Sprintf("smoke spec %q did not run: left out by test/conformance/skip.txt, or the focus does not select it", n))
		case s.Result == Skipped:
			problems = append(problems, fmt.Sprintf("smoke spec %q skipped itself: %s", n, s.Detail))
		case s.Result == Failed:
			problems = append(problems, fmt.Sprintf("smoke spec %q failed: %s", n, s.Detail))
		}
	}
	for _, s := range specs {
		if !s.Suite && s.Result != NotRun && !slices.Contains(names, s.Name) {
			problems = append(problems, fmt.Sprintf("spec %q ran (%s) but is not in test/conformance/smoke.txt: the focus selects more than the list", s.Name, s.Result))
		}
	}
	return problems
}
