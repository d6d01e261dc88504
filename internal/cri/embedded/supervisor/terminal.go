package supervisor

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/creack/pty"
)

// terminal is the pseudo-terminal of a command run with a TTY: the
// command gets the terminal side as its stdin, stdout and stderr and as
// its controlling terminal; the client's streams are copied to and from
// the other side.
type terminal struct {
	ptmx, tty *os.File
	stdio     Stdio
	out       sync.WaitGroup
	done      chan struct{}
}

// openTerminal makes the terminal and wires it into proc (before Start).
func openTerminal(proc *exec.Cmd, stdio Stdio) (*terminal, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("opening a terminal: %w", err)
	}
	proc.Stdin, proc.Stdout, proc.Stderr = tty, tty, tty
	proc.SysProcAttr.Setpgid = false // a session leader has its own group
	proc.SysProcAttr.Setsid = true
	proc.SysProcAttr.Setctty = true
	proc.SysProcAttr.Ctty = 0 // the child's fd 0
	return &terminal{ptmx: ptmx, tty: tty, stdio: stdio, done: make(chan struct{})}, nil
}

// started begins copying once the command runs; the parent's copy of the
// terminal side is closed so that the output ends when the command does.
func (t *terminal) started() {
	_ = t.tty.Close()
	if t.stdio.In != nil {
		go func() { _, _ = io.Copy(t.ptmx, t.stdio.In) }()
	}
	if t.stdio.Out != nil {
		t.out.Add(1)
		go func() {
			defer t.out.Done()
			_, _ = io.Copy(t.stdio.Out, t.ptmx)
		}()
	}
	go func() {
		for {
			select {
			case <-t.done:
				return
			case sz, ok := <-t.stdio.Resize:
				if !ok {
					return
				}
				_ = pty.Setsize(t.ptmx, &pty.Winsize{Cols: sz.Width, Rows: sz.Height})
			}
		}
	}()
}

// drain waits until the command's last output was copied.
func (t *terminal) drain() { t.out.Wait() }

func (t *terminal) close() {
	close(t.done)
	_ = t.ptmx.Close()
	_ = t.tty.Close()
}
