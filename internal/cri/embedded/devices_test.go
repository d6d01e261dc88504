package embedded

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The embedded runtime refuses, naming the field, the container and the
// device, the devices it cannot give rather than running without them.
func TestCheckDevices(t *testing.T) {
	meta := &runtimeapi.ContainerMetadata{Name: "main"}
	for _, tc := range []struct {
		name    string
		cfg     *runtimeapi.ContainerConfig
		host    bool
		wantErr string
	}{
		{"no devices", &runtimeapi.ContainerConfig{Metadata: meta}, true, ""},
		{"host image, device at its host path", &runtimeapi.ContainerConfig{Metadata: meta,
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/null", HostPath: "/dev/null"}}}, true, ""},
		{"host image, device elsewhere", &runtimeapi.ContainerConfig{Metadata: meta,
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/ex0", HostPath: "/dev/null"}}}, true,
			`CreateContainer "main" in pod ns/p: field devices: a host-image container sees the host's /dev and cannot get device nodes at other paths: /dev/ex0 (host /dev/null)`},
		{"image, device elsewhere", &runtimeapi.ContainerConfig{Metadata: meta,
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/ex0", HostPath: "/dev/null"}}}, false, ""},
		{"CDI devices", &runtimeapi.ContainerConfig{Metadata: meta,
			CDIDevices: []*runtimeapi.CDIDevice{{Name: "example.com/dev=d0"}}}, false,
			`CreateContainer "main" in pod ns/p: field cdiDevices (example.com/dev=d0): the embedded runtime cannot apply CDI devices`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDevices(tc.cfg, "ns", "p", tc.host)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("checkDevices = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("checkDevices = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
