// Package journald is a log/slog handler that writes to systemd's journal
// over its native protocol, each attribute a field of its own (component=
// prober becomes COMPONENT=prober), so that `journalctl -u minilet
// COMPONENT=prober` or `POD=...` selects an agent's records. The agent uses
// it when its standard error is the journal (a systemd service).
package journald

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// Sender writes one journal entry; journal.Send in production.
type Sender func(message string, priority journal.Priority, fields map[string]string) error

// Handler is a slog.Handler for the journal. Create it with New.
type Handler struct {
	send   Sender
	level  slog.Leveler
	ident  string
	attrs  []slog.Attr
	groups []string
	mu     *sync.Mutex // one entry at a time through one socket
}

var _ slog.Handler = (*Handler)(nil)

// New returns a handler that logs records at level or above with
// SYSLOG_IDENTIFIER ident; send nil means the system journal.
func New(ident string, level slog.Leveler, send Sender) *Handler {
	if send == nil {
		send = journal.Send
	}
	return &Handler{send: send, level: level, ident: ident, mu: &sync.Mutex{}}
}

// ToJournal reports whether standard error is connected to the journal
// (systemd's JOURNAL_STREAM names it), so that structured entries are
// worth sending instead of text lines.
func ToJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok && journal.Enabled()
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// Handle implements slog.Handler.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	fields := map[string]string{"SYSLOG_IDENTIFIER": h.ident, "SLOG_LEVEL": r.Level.String()}
	prefix := fieldPrefix(h.groups)
	for _, a := range h.attrs { // named with their groups already
		addField(fields, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addField(fields, prefix, a)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.send(r.Message, priority(r.Level), fields); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	prefix := fieldPrefix(h.groups)
	c.attrs = append(append([]slog.Attr{}, h.attrs...), prefixed(prefix, as)...)
	return &c
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(append([]string{}, h.groups...), name)
	return &c
}

// prefixed keeps attrs added under a group named by that group.
func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

func fieldPrefix(groups []string) string {
	if len(groups) == 0 {
		return ""
	}
	return strings.Join(groups, "_") + "_"
}

// addField adds a as a journal field; a group's members become fields
// named GROUP_KEY.
func addField(fields map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, m := range v.Group() {
			addField(fields, prefix+a.Key+"_", m)
		}
		return
	}
	if name := fieldName(prefix + a.Key); name != "" {
		fields[name] = v.String()
	}
}

// fieldName turns a key into a journal field name: upper case letters,
// digits and underscores, not starting with an underscore or a digit
// (those are the journal's own); "" when nothing is left.
func fieldName(key string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(key) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := strings.TrimLeft(b.String(), "_0123456789")
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	default:
		return journal.PriDebug
	}
}
