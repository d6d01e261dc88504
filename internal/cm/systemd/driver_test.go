package systemd

import (
	"context"
	"math"
	"sync"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/minilet/minilet/internal/cm/cgroups"
)

// fakeUnits stands in for systemd's manager, which this machine does not
// run (PID 1 is no init system); test/hosts runs the real one.
type fakeUnits struct {
	mu      sync.Mutex
	started map[string][]sd.Property
	set     map[string][]sd.Property
	stopped []string
}

func (f *fakeUnits) StartTransientUnitContext(_ context.Context, name, _ string, props []sd.Property, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.started[name]; ok {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.UnitExists"}
	}
	f.started[name] = props
	ch <- "done"
	return 1, nil
}

func (f *fakeUnits) SetUnitPropertiesContext(_ context.Context, name string, _ bool, props ...sd.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set[name] = props
	return nil
}

func (f *fakeUnits) StopUnitContext(_ context.Context, name, _ string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, name)
	ch <- "done"
	return 1, nil
}

func (f *fakeUnits) ResetFailedUnitContext(context.Context, string) error { return nil }

// files stands in for the file driver: it names by systemd's scheme and
// records what reached the files.
type files struct {
	cgroups.Driver
	mode    cgroups.Mode
	created []string
}

func (f *files) Mode() cgroups.Mode                            { return f.mode }
func (f *files) Path(n cgroups.Name) string                    { return cgroups.NamingSystemd.Path(n) }
func (f *files) Update(cgroups.Name, *cgroups.Resources) error { return nil }
func (f *files) Create(n cgroups.Name, _ *cgroups.Resources) error {
	f.created = append(f.created, f.Path(n))
	return nil
}
func (f *files) Destroy(context.Context, cgroups.Name) error { return nil }

func prop(ps []sd.Property, name string) (any, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p.Value.Value(), true
		}
	}
	return nil, false
}

func ptr[T any](v T) *T { return &v }

// A pod cgroup is a slice started with its limits as properties, by the
// cgroup version's names; a second Create updates the slice; Destroy
// stops it.
func TestPodSlices(t *testing.T) {
	for _, tc := range []struct {
		mode           cgroups.Mode
		shares, memory string
		sharesVal      any
	}{
		{cgroups.ModeV1, "CPUShares", "MemoryLimit", uint64(102)},
		{cgroups.ModeV2, "CPUWeight", "MemoryMax", cgroups.SharesToWeight(102)},
	} {
		units := &fakeUnits{started: map[string][]sd.Property{}, set: map[string][]sd.Property{}}
		fs := &files{mode: tc.mode}
		d := New(fs, units)
		pod := cgroups.Name{"minilet", "kubepods", "burstable", "pod1234"}
		res := &cgroups.Resources{CPUShares: ptr[uint64](102), CPUQuota: ptr[int64](15000), CPUPeriod: ptr[uint64](100000), Memory: ptr[int64](64 << 20), PidsLimit: ptr[int64](-1)}
		if err := d.Create(pod, res); err != nil {
			t.Fatal(err)
		}
		unit := "minilet-kubepods-burstable-pod1234.slice"
		props, ok := units.started[unit]
		if !ok {
			t.Fatalf("%s: units started %v, want %s", tc.mode, units.started, unit)
		}
		for name, want := range map[string]any{
			tc.shares: tc.sharesVal, tc.memory: uint64(64 << 20),
			"CPUQuotaPerSecUSec": uint64(150000), "CPUQuotaPeriodUSec": uint64(100000),
			"TasksMax": uint64(math.MaxUint64), "DefaultDependencies": false, "MemoryAccounting": true,
		} {
			if got, ok := prop(props, name); !ok || got != want {
				t.Errorf("%s: %s = %v (%v), want %v", tc.mode, name, got, ok, want)
			}
		}
		if len(fs.created) != 1 || fs.created[0] != "/minilet.slice/minilet-kubepods.slice/minilet-kubepods-burstable.slice/"+unit {
			t.Errorf("files created %v", fs.created)
		}
		if err := d.Create(pod, &cgroups.Resources{Memory: ptr[int64](32 << 20)}); err != nil {
			t.Fatal(err)
		}
		if got, _ := prop(units.set[unit], tc.memory); got != uint64(32<<20) {
			t.Errorf("%s: re-created slice's %s = %v, want set to 32Mi", tc.mode, tc.memory, got)
		}
		if err := d.Destroy(context.Background(), pod); err != nil || len(units.stopped) != 1 || units.stopped[0] != unit {
			t.Errorf("Destroy: %v, stopped %v", err, units.stopped)
		}
	}
}

// systemd keeps a CPU quota per second in 10 ms steps: rounded up, never
// below what the pod was given.
func TestQuotaRoundsUp(t *testing.T) {
	props := properties(cgroups.ModeV1, &cgroups.Resources{CPUQuota: ptr[int64](1234), CPUPeriod: ptr[uint64](100000)})
	if got, _ := prop(props, "CPUQuotaPerSecUSec"); got != uint64(20000) {
		t.Errorf("CPUQuotaPerSecUSec = %v, want 20000 (12340 rounded up)", got)
	}
	props = properties(cgroups.ModeV1, &cgroups.Resources{CPUQuota: ptr[int64](-1)})
	if got, _ := prop(props, "CPUQuotaPerSecUSec"); got != uint64(math.MaxUint64) {
		t.Errorf("unlimited quota = %v, want infinity", got)
	}
}
