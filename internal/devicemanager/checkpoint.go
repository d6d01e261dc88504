package devicemanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sort"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/minilet/minilet/internal/atomicfile"
)

// checkpointFile is the on-disk form: the data and a CRC-32C of its bytes.
type checkpointFile struct {
	Data     json.RawMessage `json:"data"`
	Checksum uint32          `json:"checksum"`
}

type checkpointData struct {
	PodDeviceEntries  []checkpointEntry   `json:"podDeviceEntries"`
	RegisteredDevices map[string][]string `json:"registeredDevices"`
}

type checkpointEntry struct {
	PodUID        string   `json:"podUID"`
	ContainerName string   `json:"containerName"`
	ResourceName  string   `json:"resourceName"`
	DeviceIDs     []string `json:"deviceIDs"`
	AllocResp     []byte   `json:"allocResp"` // protobuf ContainerAllocateResponse
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a checkpoint that exists but cannot be trusted.
var errCorrupt = errors.New("corrupt checkpoint")

// saveLocked snapshots the persisted state and hands it to the
// checkpoint writer. Caller holds m.mu, so snapshots are numbered in the
// order the state changed.
func (m *Manager) saveLocked() {
	data := checkpointData{RegisteredDevices: map[string][]string{}}
	for name := range m.devices {
		data.RegisteredDevices[name] = m.sortedIDs[name]
	}
	for uid, containers := range m.podDevs {
		for cname, resources := range containers {
			for name, a := range resources {
				data.PodDeviceEntries = append(data.PodDeviceEntries, checkpointEntry{
					PodUID: string(uid), ContainerName: cname, ResourceName: name,
					DeviceIDs: sets.List(a.ids), AllocResp: a.raw,
				})
			}
		}
	}
	m.ckpt.submit(data)
}

// write stores data atomically: temp file, fsync, rename, fsync of the
// directory.
func (c *checkpointer) write(data checkpointData) error {
	sort.Slice(data.PodDeviceEntries, func(i, j int) bool {
		a, b := data.PodDeviceEntries[i], data.PodDeviceEntries[j]
		if a.PodUID != b.PodUID {
			return a.PodUID < b.PodUID
		}
		if a.ContainerName != b.ContainerName {
			return a.ContainerName < b.ContainerName
		}
		return a.ResourceName < b.ResourceName
	})
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	out, err := json.Marshal(checkpointFile{Data: raw, Checksum: crc32.Checksum(raw, crcTable)})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.path, out, 0o600, atomicfile.Durable)
}

// read returns the stored data; os.ErrNotExist when there is none and
// errCorrupt when the file cannot be trusted.
func (c *checkpointer) read() (checkpointData, error) {
	var data checkpointData
	raw, err := os.ReadFile(c.path)
	if err != nil {
		return data, err
	}
	var f checkpointFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return data, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if sum := crc32.Checksum(f.Data, crcTable); sum != f.Checksum {
		return data, fmt.Errorf("%w: checksum %d, want %d", errCorrupt, sum, f.Checksum)
	}
	if err := json.Unmarshal(f.Data, &data); err != nil {
		return data, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return data, nil
}

// CheckpointWarning is non-empty when Start found a corrupt checkpoint and
// started without it; the agent shows it as a Warning event on the node
// (reason ReasonCheckpointCorrupt).
func (m *Manager) CheckpointWarning() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ckptWarning
}

// ReasonCheckpointCorrupt is the reason of the Warning event on the node
// (Config.Node) with CheckpointWarning's message. The kubelet only logs
// a corrupt checkpoint; minilet tells the node's events too.
const ReasonCheckpointCorrupt = "DeviceCheckpointCorrupt"

// CorruptSuffix names the one kept copy of a corrupt checkpoint:
// <checkpoint>.corrupt.
const CorruptSuffix = ".corrupt"

// restoreCheckpoint loads allocations and the known resources. Every
// known resource starts with no devices and a stopped endpoint, so its
// capacity is zero until the plugin registers again and it disappears
// after the grace period if it never does. A corrupt checkpoint is moved
// aside and the manager starts empty.
func (m *Manager) restoreCheckpoint() {
	data, err := m.ckpt.read()
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case errors.Is(err, errCorrupt):
		// One copy is kept for inspection: the newest corrupt file
		// replaces an older one, so they cannot pile up.
		aside := m.ckpt.path + CorruptSuffix
		m.mu.Lock()
		m.ckptWarning = fmt.Sprintf("device checkpoint %s was corrupt (%v); moved to %s, device allocations start empty", m.ckpt.path, err, aside)
		warning := m.ckptWarning
		m.mu.Unlock()
		if m.cfg.Node != nil {
			m.cfg.Recorder.Event(m.cfg.Node, v1.EventTypeWarning, ReasonCheckpointCorrupt, warning)
		}
		if rerr := os.Rename(m.ckpt.path, aside); rerr != nil {
			m.log.Warn("device checkpoint is corrupt and could not be moved aside; starting empty",
				"path", m.ckpt.path, "err", err, "renameErr", rerr)
		} else {
			m.log.Warn("device checkpoint is corrupt; moved aside, starting empty",
				"path", m.ckpt.path, "movedTo", aside, "err", err)
		}
		return
	case err != nil:
		m.log.Warn("reading the device checkpoint failed; starting empty", "path", m.ckpt.path, "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	for name := range data.RegisteredDevices {
		m.devices[name] = map[string]*device{}
		m.endpoints[name] = newStoppedEndpoint(name, now)
	}
	for _, en := range data.PodDeviceEntries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(en.AllocResp, resp); err != nil {
			m.log.Warn("skipping an unreadable allocation in the device checkpoint", "pod", en.PodUID,
				"container", en.ContainerName, "resource", en.ResourceName, "err", err)
			continue
		}
		m.podDevs.set(types.UID(en.PodUID), en.ContainerName, en.ResourceName,
			&allocation{ids: sets.New(en.DeviceIDs...), resp: resp, raw: en.AllocResp})
		m.mayRun.Insert(types.UID(en.PodUID)) // the last run may have started it
	}
	m.allocated = m.podDevs.inUse()
	m.log.Info("device checkpoint restored", "resources", len(data.RegisteredDevices), "allocations", len(data.PodDeviceEntries))
}
