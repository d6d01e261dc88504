package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GarbageCollect removes dead containers and sandboxes, as the kubelet's
// container GC does with MinAge 0, MaxContainers -1:
//
//   - of each (pod, container name), dead attempts beyond the newest
//     keepPerContainer are removed (keepPerContainer < 0 keeps all; the
//     kubelet's default is 1, which keeps what lastState shows);
//   - pods for which isPodGone returns true lose every dead container,
//     every stopped sandbox, their log directory, emptyDir volumes and
//     termination message files;
//   - live pods lose stopped sandboxes that are not their newest and hold
//     no containers.
//
// It removes each container's log file with it and forgets expired
// back-off entries. A nil isPodGone treats every pod as alive.
func (m *Manager) GarbageCollect(ctx context.Context, keepPerContainer int, isPodGone func(types.UID) bool) error {
	if isPodGone == nil {
		isPodGone = func(types.UID) bool { return false }
	}
	m.imageBackoff.GC()
	cs, err := m.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("container gc: list containers: %w", err)
	}
	var errs []error
	type key struct {
		uid  types.UID
		name string
	}
	groups := map[key][]*runtimeapi.Container{}
	left := map[string]int{} // sandbox ID → containers still there
	for _, c := range cs {
		uid := types.UID(c.Labels[labelPodUID])
		if uid == "" {
			continue // not ours
		}
		left[c.PodSandboxId]++
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		k := key{uid, c.GetMetadata().GetName()}
		groups[k] = append(groups[k], c)
	}
	for k, dead := range groups {
		sort.Slice(dead, func(i, j int) bool { return dead[i].CreatedAt > dead[j].CreatedAt })
		keep := keepPerContainer
		if keep < 0 {
			keep = len(dead)
		}
		if isPodGone(k.uid) {
			keep = 0
		}
		for _, c := range dead[min(keep, len(dead)):] {
			if err := m.cfg.Runtime.RemoveContainer(ctx, c.Id); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("container gc: remove %s: %w", c.Id, err))
				continue
			}
			left[c.PodSandboxId]--
			m.removeLog(c)
			m.forgetTerminationMessage(c.Id)
			m.forgetStateLost(c.Id)
		}
	}

	sbs, err := m.cfg.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("container gc: list sandboxes: %w", err))...)
	}
	byPod := map[types.UID][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		if uid := types.UID(sb.Labels[labelPodUID]); uid != "" {
			byPod[uid] = append(byPod[uid], sb)
		}
	}
	kept := map[types.UID]bool{} // pods with a sandbox left
	for uid, list := range byPod {
		sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt > list[j].CreatedAt })
		gone := isPodGone(uid)
		removedAll := true
		for i, sb := range list {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY || left[sb.Id] > 0 || (i == 0 && !gone) {
				removedAll = false
				continue
			}
			if err := m.cfg.Runtime.RemovePodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("container gc: remove sandbox %s: %w", sb.Id, err))
				removedAll = false
			}
		}
		if !removedAll {
			kept[uid] = true
		}
		if gone && removedAll && len(list) > 0 {
			md := list[0].GetMetadata()
			if err := os.RemoveAll(m.podLogDir(md.GetNamespace(), md.GetName(), string(uid))); err != nil {
				errs = append(errs, err)
			}
			if m.cfg.PodsDir != "" {
				if err := os.RemoveAll(filepath.Join(m.cfg.PodsDir, string(uid), "volumes", "kubernetes.io~empty-dir")); err != nil {
					errs = append(errs, err)
				}
				// The termination message files of its containers.
				if err := os.RemoveAll(filepath.Join(m.cfg.PodsDir, string(uid), "containers")); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := m.removeEmptyPodDirs(kept, isPodGone); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeEmptyPodDirs removes PodsDir/<uid> of gone pods that have no
// sandbox left, once nothing but the agent's own etc-hosts is in it
// (volumes and the saved status go first, each with its owner), so that
// deleted pods leave no empty directories behind. It runs every pass, so
// a directory emptied after its pod's sandboxes went is still removed.
func (m *Manager) removeEmptyPodDirs(kept map[types.UID]bool, isPodGone func(types.UID) bool) error {
	if m.cfg.PodsDir == "" {
		return nil
	}
	entries, err := os.ReadDir(m.cfg.PodsDir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("container gc: %w", err)
	}
	var errs []error
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || kept[uid] || !isPodGone(uid) {
			continue
		}
		dir := filepath.Join(m.cfg.PodsDir, e.Name())
		left, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		if len(left) > 1 || (len(left) == 1 && left[0].Name() != "etc-hosts") {
			continue // volumes or status not cleaned up yet
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("container gc: remove pod directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// removeLog deletes a removed container's log file, which the kubelet
// (not the runtime) owns.
func (m *Manager) removeLog(c *runtimeapi.Container) {
	if m.cfg.LogRoot == "" {
		return
	}
	dir := m.podLogDir(c.Labels[labelPodNamespace], c.Labels[labelPodName], c.Labels[labelPodUID])
	name := c.GetMetadata().GetName()
	path := filepath.Join(dir, containerLogPath(name, attemptOf(c)))
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		m.log.Warn("remove container log", "path", path, "err", err)
	}
}

func attemptOf(c *runtimeapi.Container) int {
	if n, err := strconv.Atoi(c.Annotations[annotationRestartCount]); err == nil {
		return n
	}
	return int(c.GetMetadata().GetAttempt())
}
