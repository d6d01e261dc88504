package lifecycle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Volumes prepares pod volumes on the node (the volumes package).
type Volumes interface {
	// Setup makes every volume of pod ready and its content current.
	Setup(ctx context.Context, pod *v1.Pod) error
	// Teardown removes what Setup made for pod uid.
	Teardown(uid types.UID) error
	// CleanupOrphans tears down the volumes of every pod not in keep.
	CleanupOrphans(keep map[types.UID]bool) error
}
