package main

import "github.com/minilet/minilet/internal/cri/embedded/monitorproc"

// runTrampoline does the exec helper's job in Go (where the C helper of
// csrc/exec.c could not be built) and exits, if this is the helper's role.
func runTrampoline() { monitorproc.MaybeRunExec() }
