package devicemanager

import (
	"testing"
	"time"
)

// Devices lists what the plugins advertise now: a device the plugin
// stopped listing is gone, and so is every device of a plugin gone for
// longer than the grace period.
func TestDevicesStopListingRemovedDevices(t *testing.T) {
	env := startManager(t, shortDir(t), Config{GracePeriod: time.Minute}, nil)
	p := startPlugin(t, env, "p.sock", "d0", "d1")
	p.setDevices(dev("d1", true))
	env.waitCounts(t, testResource, 1, 1)
	if got := env.m.Devices(); len(got) != 1 || got[0].ID != "d1" {
		t.Fatalf("Devices = %+v, want only d1", got)
	}
	p.kill()
	env.waitCounts(t, testResource, 1, 0)
	if got := env.m.Devices(); len(got) != 1 || got[0].Healthy {
		t.Fatalf("Devices within the grace period = %+v, want d1 unhealthy", got)
	}
	env.clock.Step(2 * time.Minute)
	if got := env.m.Devices(); len(got) != 0 {
		t.Fatalf("Devices after the grace period = %+v, want none", got)
	}
	if c, a := env.m.Resources(); len(c) != 0 || len(a) != 0 {
		t.Fatalf("Resources after the grace period = %v %v, want none", c, a)
	}
}
