// Package bench holds minilet's side-by-side benchmarks against the
// upstream components it replaces. It has no code of its own; run
// `go test -run '^$' -bench . ./bench/`.
package bench
