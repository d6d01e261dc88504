// Command conformance-table merges the JUnit reports of conformance runs
// (make conformance) into the side-by-side table of docs/conformance.md:
// one column per node (the reference kubelet, minilet on each runtime),
// the applicable specs' pass rates, and each spec's result in every
// column.
//
//	go run ./test/conformance/cmd/conformance-table \
//	  -ref kubelet=/tmp/cf/kubelet \
//	  -col containerd=/tmp/cf/containerd,/tmp/cf/containerd-rerun \
//	  -col embedded=/tmp/cf/embedded,/tmp/cf/embedded-resize
//
// A column may merge several report directories (a partial run, then
// reruns of some specs): a spec's result is the one of the last directory
// that ran it. A spec the reference failed or skipped is not applicable
// (an environment limit of the machine, or a spec that does not apply to
// it): it counts in no column's rate. A spec no column reached counts in
// none; one the reference did not reach but a column did counts, as
// applicable, in every column (a column that did not reach it is short
// of it).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minilet/minilet/test/conformance"
)

// column is one node's results by spec name.
type column struct {
	name    string
	results map[string]conformance.Spec
}

type columns []column

func (c *columns) String() string { return fmt.Sprint(len(*c)) }

// Set parses NAME=DIR[,DIR...].
func (c *columns) Set(v string) error {
	name, dirs, ok := strings.Cut(v, "=")
	if !ok || name == "" || dirs == "" {
		return fmt.Errorf("want NAME=DIR[,DIR...], got %q", v)
	}
	col, err := load(name, strings.Split(dirs, ","))
	if err != nil {
		return err
	}
	*c = append(*c, col)
	return nil
}

func load(name string, dirs []string) (column, error) {
	col := column{name: name, results: map[string]conformance.Spec{}}
	for _, d := range dirs {
		specs, _, err := conformance.ParseJUnitFile(filepath.Join(d, "junit_01.xml"))
		if err != nil {
			return col, fmt.Errorf("column %s: %w", name, err)
		}
		for _, s := range specs {
			if s.Suite || s.Result == conformance.NotRun || cutShort(s) {
				continue
			}
			col.results[s.Name] = s
		}
	}
	return col, nil
}

// cutShort reports whether a spec was stopped by the end of its run (the
// suite's time limit, or an interrupt) rather than failing: it did not
// run to its end, so it counts as not run.
func cutShort(s conformance.Spec) bool {
	return s.Result == conformance.Failed &&
		(strings.HasPrefix(s.Detail, "[TIMEDOUT] A suite timeout occurred") || strings.HasPrefix(s.Detail, "[INTERRUPTED] Interrupted by User"))
}

func main() {
	var ref, cols columns
	flag.Var(&ref, "ref", "the reference node's column, NAME=DIR[,DIR...] (one)")
	flag.Var(&cols, "col", "a column, NAME=DIR[,DIR...] (repeatable)")
	flag.Parse()
	if len(ref) != 1 || len(cols) == 0 {
		fmt.Fprintln(os.Stderr, "conformance-table: want one -ref and at least one -col")
		os.Exit(2)
	}
	if err := write(os.Stdout, ref[0], cols); err != nil {
		fmt.Fprintln(os.Stderr, "conformance-table:", err)
		os.Exit(1)
	}
}

// applicable reports whether spec counts: the reference node passed it
// or did not reach it.
func applicable(ref column, spec string) bool {
	r, ran := ref.results[spec]
	return !ran || r.Result == conformance.Passed
}

// errWriter keeps the first error of the writes to w, so the table can
// be printed piece by piece and checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func write(out io.Writer, ref column, cols columns) error {
	w := &errWriter{w: out}
	all := append(columns{ref}, cols...)
	names := map[string]bool{}
	for _, c := range all {
		for n := range c.results {
			names[n] = true
		}
	}
	specs := make([]string, 0, len(names))
	for n := range names {
		specs = append(specs, n)
	}
	sort.Strings(specs)

	w.printf("| | %s (reference) |", ref.name)
	for _, c := range cols {
		w.printf(" %s |", c.name)
	}
	w.printf("\n|---|---|%s\n", strings.Repeat("---|", len(cols)))
	nApplicable := 0
	for _, s := range specs {
		if applicable(ref, s) {
			nApplicable++
		}
	}
	w.printf("| specs run | %d |", len(ref.results))
	for _, c := range cols {
		w.printf(" %d |", len(c.results))
	}
	refPassed := 0
	for _, r := range ref.results {
		if r.Result == conformance.Passed {
			refPassed++
		}
	}
	w.printf("\n| applicable specs passed | %d / %d (%d not run) |", refPassed, nApplicable, nApplicable-refPassed)
	for _, c := range cols {
		passed, ran := 0, 0
		for _, s := range specs {
			if !applicable(ref, s) {
				continue
			}
			if r, ok := c.results[s]; ok {
				ran++
				if r.Result == conformance.Passed {
					passed++
				}
			}
		}
		w.printf(" %d / %d (%.1f %%; %d not run) |", passed, nApplicable, 100*float64(passed)/float64(max(nApplicable, 1)), nApplicable-ran)
	}
	w.printf("\n\n| spec | %s |", ref.name)
	for _, c := range cols {
		w.printf(" %s |", c.name)
	}
	w.printf("\n|---|---|%s\n", strings.Repeat("---|", len(cols)))
	for _, s := range specs {
		w.printf("| %s |", cell(s))
		for _, c := range all {
			w.printf(" %s |", result(c, s))
		}
		w.printf("\n")
	}
	return w.err
}

// result is a spec's cell in a column: pass, FAIL with the first line of
// why, skip with its reason, or – when the column did not run it.
func result(c column, spec string) string {
	r, ok := c.results[spec]
	switch {
	case !ok:
		return "–"
	case r.Result == conformance.Passed:
		return "pass"
	case r.Result == conformance.Skipped:
		return "skip: " + cell(trim(r.Detail, 80))
	default:
		return "**FAIL**: " + cell(trim(r.Detail, 120))
	}
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
