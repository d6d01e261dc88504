// Package systemd is cgroupDriver: systemd done as the kubelet and runc do
// it: the QoS and pod cgroups are systemd slice units (kubepods.slice,
// kubepods-burstable.slice, kubepods-burstable-pod<UID>.slice, below the
// cgroup root's own slice), created through systemd's D-Bus API with their
// resource limits as unit properties. systemd owns those cgroups, so a
// `systemctl daemon-reload` re-applies the same values instead of undoing
// minilet's; the files are then written too, with the same values, for
// what a unit property does not cover on this cgroup version.
package systemd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/minilet/minilet/internal/cm/cgroups"
	"github.com/minilet/minilet/internal/errdefs"
)

// jobTimeout bounds one unit job (start, stop).
const jobTimeout = 30 * time.Second

// Units is what the driver needs of systemd's manager.
type Units interface {
	StartTransientUnitContext(ctx context.Context, name, mode string, props []sd.Property, ch chan<- string) (int, error)
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, props ...sd.Property) error
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
}

// Driver is a cgroups.Driver whose cgroups are systemd slices. It embeds
// the file driver (systemd naming) for everything else.
type Driver struct {
	cgroups.Driver
	units Units
}

var _ cgroups.Driver = (*Driver)(nil)

// Connect returns the driver over files, talking to the system's systemd
// for as long as ctx lasts.
// Without systemd as the init system it fails, as the kubelet's systemd
// cgroup driver does.
func Connect(ctx context.Context, files cgroups.Driver) (*Driver, error) {
	conn, err := sd.NewWithContext(ctx)
	if err != nil {
		return nil, errdefs.Classify(fmt.Errorf("cgroupDriver systemd needs systemd as the init system (its D-Bus API): %w", err), errdefs.ErrUnavailable)
	}
	return New(files, conn), nil
}

// New returns the driver over files (systemd naming) and units.
func New(files cgroups.Driver, units Units) *Driver { return &Driver{Driver: files, units: units} }

// Unit is the slice unit of cgroup n: the last component of its systemd
// path ("kubepods-burstable-pod123.slice").
func (d *Driver) Unit(n cgroups.Name) string { return filepath.Base(d.Path(n)) }

// Create starts n's slice with res as its properties (or updates the slice
// already there), then makes and writes the cgroup's files as the file
// driver does.
func (d *Driver) Create(n cgroups.Name, res *cgroups.Resources) error {
	if len(n) == 0 {
		return d.Driver.Create(n, res)
	}
	unit := d.Unit(n)
	props := append([]sd.Property{
		sd.PropDescription("minilet " + strings.Join(n, "/")),
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		{Name: "CPUAccounting", Value: godbus.MakeVariant(true)},
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "TasksAccounting", Value: godbus.MakeVariant(true)},
	}, properties(d.Mode(), res)...)
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	err := d.runJob(ctx, "start "+unit, func(ch chan<- string) (int, error) {
		return d.units.StartTransientUnitContext(ctx, unit, "replace", props, ch)
	})
	if isExists(err) {
		err = d.units.SetUnitPropertiesContext(ctx, unit, true, properties(d.Mode(), res)...)
	}
	if err != nil {
		return fmt.Errorf("systemd slice %s: %w", unit, err)
	}
	return d.Driver.Create(n, res)
}

// Update sets res on n's slice and in its files.
func (d *Driver) Update(n cgroups.Name, res *cgroups.Resources) error {
	if len(n) > 0 {
		if props := properties(d.Mode(), res); len(props) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
			defer cancel()
			if err := d.units.SetUnitPropertiesContext(ctx, d.Unit(n), true, props...); err != nil {
				return fmt.Errorf("systemd slice %s: %w", d.Unit(n), err)
			}
		}
	}
	return d.Driver.Update(n, res)
}

// Destroy ends what runs in n (as the file driver does) and stops its
// slice, which removes the cgroups systemd made.
func (d *Driver) Destroy(ctx context.Context, n cgroups.Name) error {
	if err := d.Driver.Destroy(ctx, n); err != nil {
		return err
	}
	if len(n) == 0 {
		return nil
	}
	return d.StopSlice(ctx, n)
}

// StopSlice stops n's slice unit (a missing one is no error) and forgets
// its failures, leaving what the file driver does to the caller.
func (d *Driver) StopSlice(ctx context.Context, n cgroups.Name) error {
	unit := d.Unit(n)
	ctx, cancel := context.WithTimeout(ctx, jobTimeout)
	defer cancel()
	err := d.runJob(ctx, "stop "+unit, func(ch chan<- string) (int, error) {
		return d.units.StopUnitContext(ctx, unit, "replace", ch)
	})
	if err != nil && !isNoSuchUnit(err) {
		return fmt.Errorf("systemd slice %s: %w", unit, err)
	}
	_ = d.units.ResetFailedUnitContext(ctx, unit)
	return nil
}

// runJob starts a unit job and waits for its result.
func (d *Driver) runJob(ctx context.Context, what string, start func(ch chan<- string) (int, error)) error {
	ch := make(chan string, 1)
	if _, err := start(ch); err != nil {
		return err
	}
	select {
	case result := <-ch:
		if result != "done" {
			return fmt.Errorf("%s: job %s", what, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// properties are res as unit properties, by cgroup version: v1's
// CPUShares and MemoryLimit, v2's CPUWeight (the kubelet's conversion) and
// MemoryMax; the CFS quota as CPUQuotaPerSecUSec with its period, and the
// pids limit as TasksMax ("infinity" for unlimited).
func properties(mode cgroups.Mode, res *cgroups.Resources) []sd.Property {
	if res == nil {
		return nil
	}
	var out []sd.Property
	add := func(name string, v any) { out = append(out, sd.Property{Name: name, Value: godbus.MakeVariant(v)}) }
	if res.CPUShares != nil {
		if mode == cgroups.ModeV2 {
			add("CPUWeight", cgroups.SharesToWeight(*res.CPUShares))
		} else {
			add("CPUShares", *res.CPUShares)
		}
	}
	if res.Memory != nil {
		name := "MemoryLimit"
		if mode == cgroups.ModeV2 {
			name = "MemoryMax"
		}
		add(name, limit(*res.Memory))
	}
	if res.CPUQuota != nil {
		period := uint64(100_000)
		if res.CPUPeriod != nil && *res.CPUPeriod > 0 {
			period = *res.CPUPeriod
		}
		perSec := uint64(math.MaxUint64)
		if *res.CPUQuota > 0 {
			// systemd keeps the quota per second in whole percents' worth
			// of µs: round up to 10 ms so that the quota never shrinks.
			perSec = uint64(*res.CPUQuota) * 1_000_000 / period
			if r := perSec % 10_000; r != 0 {
				perSec += 10_000 - r
			}
		}
		add("CPUQuotaPerSecUSec", perSec)
		add("CPUQuotaPeriodUSec", period)
	}
	if res.PidsLimit != nil {
		add("TasksMax", limit(*res.PidsLimit))
	}
	return out
}

// limit is a byte or task limit as systemd takes it: -1 (or any negative)
// is unlimited.
func limit(v int64) uint64 {
	if v < 0 {
		return math.MaxUint64
	}
	return uint64(v)
}

func isExists(err error) bool { return dbusErrorName(err) == "org.freedesktop.systemd1.UnitExists" }

func isNoSuchUnit(err error) bool {
	name := dbusErrorName(err)
	return name == "org.freedesktop.systemd1.NoSuchUnit" || name == "org.freedesktop.DBus.Error.UnknownObject"
}

// dbusErrorName is the D-Bus error name of err ("" if it is none).
func dbusErrorName(err error) string {
	var v godbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *godbus.Error
	if errors.As(err, &p) && p != nil {
		return p.Name
	}
	return ""
}
