//go:build !cgo

package main

import "github.com/minilet/minilet/internal/cri/embedded/monitorproc"

// runTrampoline does the exec helper's job in Go when the C part could not
// be built.
func runTrampoline() { monitorproc.MaybeRunExec() }
