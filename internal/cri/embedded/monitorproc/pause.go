package monitorproc

import (
	"os"
	"os/signal"
	"syscall"
)

// The pause holds a pod's shared PID namespace (shareProcessNamespace): it
// is started as the namespace's PID 1, into which the pod's containers are
// then forked, and so lives as long as the sandbox. As PID 1 it reaps the
// orphans of the pod's processes; it ends on SIGTERM or SIGINT (a PID 1
// gets no signal it does not handle).
const (
	PauseEnv  = "MINILET_EMBEDDED_PAUSE"
	PauseArg0 = "minilet-pause"
)

func runPause() int {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return 0
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}
