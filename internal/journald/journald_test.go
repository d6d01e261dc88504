package journald

import (
	"log/slog"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

type entry struct {
	msg    string
	pri    journal.Priority
	fields map[string]string
}

// Attributes become journal fields by name (a component's, a record's, a
// group's members), priorities follow the level, and below the level
// nothing is sent.
func TestRecordsBecomeStructuredEntries(t *testing.T) {
	var got []entry
	h := New("minilet", slog.LevelInfo, func(m string, p journal.Priority, f map[string]string) error {
		got = append(got, entry{m, p, f})
		return nil
	})
	log := slog.New(h).With("component", "prober")
	log.Warn("probe failed", "pod", "default/web-node", "probe-type", "Readiness", slog.Group("result", "code", 503))
	log.Debug("not sent")
	log.WithGroup("cri").Error("call failed", "method", "RunPodSandbox")
	if len(got) != 2 {
		t.Fatalf("sent %d entries, want 2: %+v", len(got), got)
	}
	w := got[0]
	want := map[string]string{"SYSLOG_IDENTIFIER": "minilet", "COMPONENT": "prober", "POD": "default/web-node", "PROBE_TYPE": "Readiness", "RESULT_CODE": "503", "SLOG_LEVEL": "WARN"}
	if w.msg != "probe failed" || w.pri != journal.PriWarning {
		t.Errorf("entry = %q priority %d", w.msg, w.pri)
	}
	for k, v := range want {
		if w.fields[k] != v {
			t.Errorf("field %s = %q, want %q (fields %v)", k, w.fields[k], v, w.fields)
		}
	}
	if e := got[1]; e.pri != journal.PriErr || e.fields["CRI_METHOD"] != "RunPodSandbox" || e.fields["COMPONENT"] != "prober" {
		t.Errorf("grouped entry = %+v", e)
	}
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{"pod": "POD", "probe-type": "PROBE_TYPE", "_hidden": "HIDDEN", "9lives": "LIVES", "ünï": "N_", "": ""} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
}
