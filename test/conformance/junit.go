// Package conformance runs the upstream Kubernetes e2e [NodeConformance]
// specs against minilet nodes (TestNodeConformance, `make conformance`; and
// TestNodeConformanceSmoke, a few fast ones in `make test` when the suite's
// binaries are cached) and turns the suite's JUnit report into a table of
// results.
package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Result is what became of one spec in a run.
type Result string

// The results a spec can have. A spec the focus or skip list left out is
// NotRun: it is no part of the run's counts.
const (
	Passed  Result = "passed"
	Failed  Result = "failed"
	Skipped Result = "skipped" // the spec itself skipped, with its reason
	NotRun  Result = "not run" // filtered out by focus or skip list, or pending
)

// Spec is one spec's line of the table.
type Spec struct {
	Name    string // the spec's full text, without ginkgo's "[It] "
	Result  Result
	Seconds float64
	// Detail is the first line of the failure or skip message.
	Detail string
	// Failure is a failed spec's whole failure message (what failed,
	// where, when), for a log.
	Failure string
	// Suite marks the suite's own set-up and reporting nodes
	// ([SynchronizedBeforeSuite], [ReportAfterSuite] ...): not specs, so
	// not counted, and shown only when they fail.
	Suite bool
}

// Summary counts a run's results.
type Summary struct {
	Passed, Failed, Skipped, NotRun int
}

func (s Summary) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped (of %d run; %d not selected)",
		s.Passed, s.Failed, s.Skipped, s.Passed+s.Failed+s.Skipped, s.NotRun)
}

// The parts of ginkgo's JUnit report (reporters.JUnitTestSuites) read here.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// ParseJUnit reads a JUnit report as e2e.test writes it (--report-dir:
// junit_01.xml) and returns its specs, sorted by name, and their counts.
func ParseJUnit(r io.Reader) ([]Spec, Summary, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, Summary{}, fmt.Errorf("parsing JUnit report: %w", err)
	}
	var specs []Spec
	var sum Summary
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			name, isSpec := strings.CutPrefix(c.Name, "[It] ")
			sp := Spec{Name: name, Seconds: c.Time, Suite: !isSpec}
			switch c.Status {
			case "passed":
				sp.Result = Passed
			case "skipped", "pending":
				msg := ""
				if c.Skipped != nil {
					msg = c.Skipped.Message
				}
				// Ginkgo writes "skipped" for a spec the filters left
				// out and "skipped - REASON" for one that skipped itself.
				if reason, ok := strings.CutPrefix(msg, "skipped - "); ok {
					sp.Result, sp.Detail = Skipped, firstLine(reason)
				} else {
					sp.Result = NotRun
				}
			case "":
				return nil, Summary{}, fmt.Errorf("parsing JUnit report: testcase %q has no status", c.Name)
			default: // failed, panicked, interrupted, aborted, timedout
				sp.Result = Failed
				switch {
				case c.Failure != nil:
					sp.Failure = strings.TrimSpace(c.Failure.Message + "\n" + c.Failure.Text)
				case c.Error != nil:
					sp.Failure = strings.TrimSpace(c.Error.Message + "\n" + c.Error.Text)
				}
				sp.Detail = firstLine(sp.Failure)
				if sp.Detail == "" {
					sp.Detail = c.Status
				}
			}
			switch {
			case sp.Suite:
			case sp.Result == Passed:
				sum.Passed++
			case sp.Result == Failed:
				sum.Failed++
			case sp.Result == Skipped:
				sum.Skipped++
			default:
				sum.NotRun++
			}
			specs = append(specs, sp)
		}
	}
	sort.SliceStable(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	return specs, sum, nil
}

// ParseJUnitFile is ParseJUnit of the file at path.
func ParseJUnitFile(path string) ([]Spec, Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Summary{}, err
	}
	defer f.Close() //nolint:errcheck // read only
	specs, sum, err := ParseJUnit(f)
	if err != nil {
		return nil, Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	return specs, sum, nil
}

// firstLine is the first non-blank line of s, trimmed.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// WriteTable writes the specs that ran (NotRun left out) and the suite
// nodes that failed as a Markdown table: spec | result | time | detail,
// followed by the summary line.
func WriteTable(w io.Writer, specs []Spec, sum Summary) error {
	var b strings.Builder
	b.WriteString("| spec | result | time | detail |\n| --- | --- | ---: | --- |\n")
	for _, s := range specs {
		if s.Result == NotRun || (s.Suite && s.Result != Failed) {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1fs | %s |\n", cell(s.Name), s.Result, s.Seconds, cell(s.Detail))
	}
	fmt.Fprintf(&b, "\n%s\n", sum)
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
