// Command minilet-exec is the exec helper of minilet's embedded runtime:
// the agent starts it for every exec into a container (exec probes, kubectl
// exec), with argv[0] "minilet-exec", and it joins the container (cgroups,
// namespaces, root, user, capabilities, no_new_privs, seccomp) and becomes
// the command. The work is done in C (exec.c) from an ELF constructor,
// before the Go runtime starts: a Go program's start alone costs more CPU
// than an exec probe should in all. Built without cgo, the Go trampoline
// of monitorproc does the same job, at that cost (trampoline_nocgo.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	runTrampoline()
	fmt.Fprintln(os.Stderr, "minilet-exec: this program is started by the minilet agent for each exec into a container; it is not run by hand")
	os.Exit(2)
}
