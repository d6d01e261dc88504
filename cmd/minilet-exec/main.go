// Command minilet-exec is the exec helper of minilet's embedded runtime:
// the agent starts it for every exec into a container (exec probes, kubectl
// exec), with argv[0] "minilet-exec", and it joins the container (cgroups,
// namespaces, root, user, capabilities, no_new_privs, seccomp) and becomes
// the command.
//
// The installed helper is not this Go program but the freestanding C one of
// csrc/exec.c, which scripts/build-exec-helper.sh (make build) builds at
// bin/minilet-exec: a Go program's start alone costs more CPU than an exec
// probe should in all. This program, monitorproc's trampoline, is what
// that script builds where the C one cannot be built; both do the same job
// (the parity test compares them).
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
