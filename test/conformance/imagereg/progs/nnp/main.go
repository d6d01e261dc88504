// Command nnp is the nonewprivs image's program: installed set-user-ID
// root, it prints the effective uid it runs with, so a test sees whether
// the runtime let the set-user-ID bit raise privileges
// (allowPrivilegeEscalation, no_new_privs). Package imagereg builds it
// statically into the nonewprivs test image.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
