package conformance

import (
	"strings"
	"testing"
)

// A report of the shape e2e.test writes: one spec of each outcome.
const sampleJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="3" errors="0" failures="1" time="12.5">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="5" disabled="3" skipped="0" errors="0" failures="1" time="12.5">
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.2"></testcase>
    <testcase name="[It] [sig-node] Pods should contain environment variables for services [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="8.3">
      <failure type="failed">[FAILED] Timed out after 300s: pod "client-envvars" | not Running&#xA;In [It] at: pods.go:1</failure>
    </testcase>
    <testcase name="[It] [sig-node] Probing container should be restarted with a GRPC liveness probe [NodeConformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for providers [gce]"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Deployment should run [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.5"></testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="failed" time="0">
      <failure type="failed">[FAILED] writing report: disk full</failure>
    </testcase>
  </testsuite>
</testsuites>`

func TestParseJUnitSortsAndCounts(t *testing.T) {
	specs, sum, err := ParseJUnit(strings.NewReader(sampleJUnit))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Passed: 1, Failed: 1, Skipped: 1, NotRun: 1}); sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	byName := map[string]Spec{}
	for i, s := range specs {
		byName[s.Name] = s
		if i > 0 && specs[i-1].Name > s.Name {
			t.Errorf("specs not sorted: %q before %q", specs[i-1].Name, s.Name)
		}
	}
	fail := byName["[sig-node] Pods should contain environment variables for services [NodeConformance] [Conformance]"]
	if fail.Result != Failed || fail.Detail != `[FAILED] Timed out after 300s: pod "client-envvars" | not Running` || fail.Seconds != 8.3 ||
		fail.Failure != "[FAILED] Timed out after 300s: pod \"client-envvars\" | not Running\nIn [It] at: pods.go:1" {
		t.Errorf("failed spec: %+v", fail)
	}
	skip := byName["[sig-node] Probing container should be restarted with a GRPC liveness probe [NodeConformance]"]
	if skip.Result != Skipped || skip.Detail != "Only supported for providers [gce]" {
		t.Errorf("skipped spec: %+v", skip)
	}
	if r := byName["[sig-apps] Deployment should run [Conformance]"].Result; r != NotRun {
		t.Errorf("filtered-out spec: %s, want %s", r, NotRun)
	}

	var b strings.Builder
	if err := WriteTable(&b, specs, sum); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	for _, want := range []string{
		"| spec | result | time | detail |\n",
		"| [sig-node] Pods should get a host IP [NodeConformance] [Conformance] | passed | 4.2s |  |\n",
		`| failed | 8.3s | [FAILED] Timed out after 300s: pod "client-envvars" \| not Running |` + "\n",
		"| [ReportAfterSuite] Kubernetes e2e suite report | failed | 0.0s | [FAILED] writing report: disk full |\n",
		"\n1 passed, 1 failed, 1 skipped (of 3 run; 1 not selected)\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "Deployment") || strings.Contains(table, "[SynchronizedBeforeSuite]") {
		t.Errorf("table lists a spec that did not run or a suite node that passed:\n%s", table)
	}
	if bs := byName["[SynchronizedBeforeSuite]"]; !bs.Suite || bs.Result != Passed {
		t.Errorf("suite node: %+v", bs)
	}
}

func TestParseJUnitRejectsGarbage(t *testing.T) {
	if _, _, err := ParseJUnit(strings.NewReader("<testsuites><testsuite><testcase name=\"x\"></testcase>")); err == nil {
		t.Error("a truncated report parsed without error")
	}
	if _, _, err := ParseJUnit(strings.NewReader(`<testsuites><testsuite><testcase name="x"></testcase></testsuite></testsuites>`)); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("a testcase without status: %v, want an error naming it", err)
	}
}
