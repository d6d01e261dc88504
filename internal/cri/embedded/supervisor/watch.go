package supervisor

import (
	"context"
	"path/filepath"
	"time"

	"github.com/minilet/minilet/internal/cri/embedded/internal/statefile"
	"github.com/minilet/minilet/internal/cri/embedded/monitorproc"
)

// adoptedPollInterval bounds how late the exit of a re-adopted container
// (one whose monitor a previous agent process started, so not our child) is
// noticed. The exits of our own monitors' containers are noticed when the
// monitor process ends, without polling.
const adoptedPollInterval = time.Second

// watch notices container exits: when one of our own monitor children ends
// (kick), and by polling only while re-adopted containers run. Process
// exits are watched in real time, whatever clock stamps records.
func (s *Supervisor) watch(ctx context.Context) {
	defer s.wg.Done()
	poll := time.NewTimer(adoptedPollInterval)
	defer poll.Stop()
	for {
		adopted := s.checkExits()
		var tick <-chan time.Time
		if adopted > 0 {
			poll.Reset(adoptedPollInterval)
			tick = poll.C
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-s.kick:
		}
	}
}

// checkExits is one step of watch: it records the exit of every running
// container whose monitor wrote an exit record or died. Containers of our
// own monitors are only looked at once their monitor ended. It returns how
// many running containers have a monitor that is not our child.
func (s *Supervisor) checkExits() (adopted int) {
	s.mu.Lock()
	var check []*container
	for _, c := range s.containers {
		if c.start == nil || c.exit != nil {
			continue
		}
		if !c.child {
			adopted++
		}
		if !c.child || c.monitorDone {
			check = append(check, c)
		}
	}
	s.mu.Unlock()
	for _, c := range check {
		x := s.loadExit(c.dir)
		if x == nil {
			if monitorAlive(c.start) {
				continue
			}
			// The monitor may have written the record just before exiting.
			if x = s.loadExit(c.dir); x == nil {
				// It did not: the container may well still run (see
				// recover.go).
				x = s.monitorLost(c)
				if err := statefile.Write(filepath.Join(c.dir, monitorproc.FileExit), x); err != nil {
					s.log.Warn("cannot record container exit", "container", c.rec.ID, "err", err)
				}
			}
		}
		s.setExit(c, x)
	}
	return adopted
}

func (s *Supervisor) setExit(c *container, x *monitorproc.ExitRecord) {
	s.mu.Lock()
	changed := c.exit == nil
	if changed {
		c.exit = x
		close(c.exited)
	}
	s.mu.Unlock()
	if changed {
		s.log.Info("container exited", "container", c.rec.ID, "name", c.rec.Name, "exitCode", x.ExitCode, "reason", x.Reason)
		s.signalChange()
	}
}

// monitorAlive reports whether the monitor that wrote st still runs.
func monitorAlive(st *monitorproc.StartRecord) bool {
	return st.Monitor().Alive()
}
