//go:build cgo

package main

// The C exec helper (exec.c) runs from a constructor and never returns in
// the trampoline role; linked statically, it starts without a dynamic
// loader.

// #cgo CFLAGS: -O2 -Wall
// #cgo LDFLAGS: -static
import "C"

// runTrampoline has nothing to do: exec.c did it, or this is not the role.
func runTrampoline() {}
