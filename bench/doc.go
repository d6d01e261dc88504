// Package bench holds minilet's benchmarks: side-by-side runs against the
// upstream components it replaces, and whole-agent runs of the real
// minilet binary (pod start-up, node overhead, crash-loop restart timing;
// these need root and skip otherwise). It has no code of its own; run
// `go test -run '^$' -bench . -benchtime 1x ./bench/`.
package bench
