package container

import (
	"fmt"
	"strings"

	"github.com/minilet/minilet/internal/errdefs"
)

// ID names a container as pod status does: the runtime's name and the
// runtime's own ID ("containerd://0f3a..." is {Type: "containerd", ID:
// "0f3a..."}). CRI calls take ID.ID; status and the prober show String().
type ID struct {
	Type string
	ID   string
}

// String is the "<type>://<id>" form of pod status; "" for the zero ID.
func (id ID) String() string {
	if id.ID == "" {
		return ""
	}
	return id.Type + "://" + id.ID
}

// IsZero reports whether id names no container.
func (id ID) IsZero() bool { return id.ID == "" }

// ParseID reads the "<type>://<id>" form of pod status.
func ParseID(s string) (ID, error) {
	typ, id, ok := strings.Cut(s, "://")
	if !ok || typ == "" || id == "" {
		return ID{}, fmt.Errorf("container ID %q: want <runtime>://<id>: %w", s, errdefs.ErrInvalidArgument)
	}
	return ID{Type: typ, ID: id}, nil
}
