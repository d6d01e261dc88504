package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// report writes a JUnit report with the given spec results into a new
// directory and returns it.
func report(t *testing.T, results map[string]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="Kubernetes e2e suite">`)
	for name, status := range results {
		switch status {
		case "failed":
			fmt.Fprintf(&b, `<testcase name="[It] %s" status="failed" time="1"><failure type="failed">[FAILED] broke</failure></testcase>`, name)
		case "interrupted":
			fmt.Fprintf(&b, `<testcase name="[It] %s" status="interrupted" time="1"><failure type="interrupted">[INTERRUPTED] Interrupted by User</failure></testcase>`, name)
		case "skipped":
			fmt.Fprintf(&b, `<testcase name="[It] %s" status="skipped" time="0"><skipped message="skipped - not here"></skipped></testcase>`, name)
		default:
			fmt.Fprintf(&b, `<testcase name="[It] %s" status="%s" time="1"></testcase>`, name, status)
		}
	}
	b.WriteString(`</testsuite></testsuites>`)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junit_01.xml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The reference's failures and skips leave the rates; a spec only a column
// reached counts; a later report of a column overrides an earlier one.
func TestRatesCountWhatTheReferenceCouldRun(t *testing.T) {
	ref, err := load("kubelet", []string{report(t, map[string]string{
		"a": "passed", "b": "passed", "env": "failed", "gce": "skipped",
	})})
	if err != nil {
		t.Fatal(err)
	}
	col, err := load("embedded", []string{
		report(t, map[string]string{"a": "failed", "b": "passed", "env": "failed", "gce": "skipped", "c": "passed"}),
		report(t, map[string]string{"a": "passed", "d": "interrupted"}), // a rerun after a fix, stopped early
	})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := write(&out, ref, columns{col}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| applicable specs passed | 2 / 3 (1 not run) | 3 / 3 (100.0 %; 0 not run) |",
		"| env | **FAIL**: [FAILED] broke | **FAIL**: [FAILED] broke |",
		"| c | – | pass |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "| d |") {
		t.Errorf("a spec the run's interrupt cut short is in the table:\n%s", out.String())
	}
}
