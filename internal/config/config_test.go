package config

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/minilet/minilet/internal/errdefs"
	"github.com/minilet/minilet/internal/eviction"
)

func init() {
	hostname = func() (string, error) { return "Test-Host", nil }
}

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// load parses args (and a config file with the given body, if non-empty).
func load(t *testing.T, file string, args ...string) (*Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	var o Options
	AddFlags(fs, &o)
	if file != "" {
		path := filepath.Join(t.TempDir(), "kubelet.yaml")
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config="+path)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return Load(&o, fs)
}

func mustLoad(t *testing.T, file string, args ...string) *Config {
	t.Helper()
	c, err := load(t, file, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func thresholds(ts []eviction.Threshold) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.String())
	}
	return strings.Join(s, ",")
}

func TestDefaults(t *testing.T) {
	for name, file := range map[string]string{"flags only": "", "empty file": header} {
		t.Run(name, func(t *testing.T) {
			c := mustLoad(t, file)
			checks := []struct {
				field     string
				got, want any
			}{
				{"NodeName", c.NodeName, "test-host"},
				{"RootDir", c.RootDir, "/var/lib/minilet"},
				{"DevicePluginDir", c.DevicePluginDir, "/var/lib/kubelet/device-plugins"},
				{"Address", c.Address.String(), "127.0.0.1"},
				{"ReadOnlyPort", c.ReadOnlyPort, 10255},
				{"ContainerRuntimeEndpoint", c.ContainerRuntimeEndpoint, ""},
				{"CgroupRoot", c.CgroupRoot, "/minilet"},
				{"CgroupsPerQOS", c.CgroupsPerQOS, true},
				{"CgroupDriver", c.CgroupDriver, "cgroupfs"},
				{"SyncFrequency", c.SyncFrequency, time.Minute},
				{"FileCheckFrequency", c.FileCheckFrequency, 20 * time.Second},
				{"HTTPCheckFrequency", c.HTTPCheckFrequency, 20 * time.Second},
				{"NodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency, 10 * time.Second},
				{"MaxPods", c.MaxPods, 110},
				{"ImageGCHighThresholdPercent", c.ImageGCHighThresholdPercent, 85},
				{"ImageGCLowThresholdPercent", c.ImageGCLowThresholdPercent, 80},
				{"ImageMinimumGCAge", c.ImageMinimumGCAge, 2 * time.Minute},
				{"CPUCFSQuota", c.CPUCFSQuota, true},
				{"CPUCFSQuotaPeriod", c.CPUCFSQuotaPeriod, 100 * time.Millisecond},
				{"PodPidsLimit", c.PodPidsLimit, int64(-1)},
				{"RegistryPullQPS", c.RegistryPullQPS, 5},
				{"SerializeImagePulls", c.SerializeImagePulls, true},
				{"SeccompDefault", c.SeccompDefault, false},
				{"ContainerLogMaxSize", c.ContainerLogMaxSize, int64(10 << 20)},
				{"ContainerLogMaxFiles", c.ContainerLogMaxFiles, 5},
				{"ContainerLogMonitorInterval", c.ContainerLogMonitorInterval, 10 * time.Second},
				{"EvictionPressureTransitionPeriod", c.EvictionPressureTransitionPeriod, 5 * time.Minute},
				{"EvictionHard", thresholds(c.EvictionHard), "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%"},
				{"LogLevel", c.LogLevel, slog.LevelInfo},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %v, want %v", ch.field, ch.got, ch.want)
				}
			}
		})
	}
}

// Flags set on the command line beat the file; flag defaults do not.
func TestFileAndFlagPrecedence(t *testing.T) {
	file := header + `maxPods: 50
syncFrequency: 30s
imageGCHighThresholdPercent: 90
readOnlyPort: 0
staticPodPath: /etc/file-pods
cgroupsPerQOS: false
kubeReserved: {cpu: 100m, memory: 256Mi}
staticPodURLHeader: {X-A: [one]}
`
	c := mustLoad(t, file, "--max-pods=20", "--pod-manifest-path=/etc/flag-pods", "--hostname-override=Node-1", "--v=4")
	if c.MaxPods != 20 || c.StaticPodPath != "/etc/flag-pods" {
		t.Errorf("explicit flags lost: maxPods=%d staticPodPath=%s", c.MaxPods, c.StaticPodPath)
	}
	if c.SyncFrequency != 30*time.Second || c.ImageGCHighThresholdPercent != 90 || c.CgroupsPerQOS {
		t.Errorf("file values overridden by flag defaults: %v %d %v", c.SyncFrequency, c.ImageGCHighThresholdPercent, c.CgroupsPerQOS)
	}
	if c.ReadOnlyPort != 0 {
		t.Errorf("explicit readOnlyPort 0 in the file became %d", c.ReadOnlyPort)
	}
	if got := c.KubeReserved.Memory().String(); got != "256Mi" || c.KubeReserved.Cpu().MilliValue() != 100 {
		t.Errorf("kubeReserved %v", c.KubeReserved)
	}
	if c.StaticPodURLHeader.Get("X-A") != "one" || c.NodeName != "node-1" || c.LogLevel != slog.LevelDebug {
		t.Errorf("headers %v node %q level %v", c.StaticPodURLHeader, c.NodeName, c.LogLevel)
	}

	c = mustLoad(t, "", "--read-only-port=0", "--kube-reserved=cpu=200m,memory=1Gi",
		"--eviction-hard=memory.available<200Mi,nodefs.available<5%", "--manifest-url-header=A:1,B:2", "--manifest-url-header=A:3")
	if c.ReadOnlyPort != 0 || c.KubeReserved.Cpu().MilliValue() != 200 {
		t.Errorf("flags: readOnlyPort=%d kubeReserved=%v", c.ReadOnlyPort, c.KubeReserved)
	}
	if got := thresholds(c.EvictionHard); got != "memory.available<200Mi,nodefs.available<5%" {
		t.Errorf("--eviction-hard gave %s", got)
	}
	if got := c.StaticPodURLHeader.Values("A"); len(got) != 2 || got[1] != "3" {
		t.Errorf("headers %v", c.StaticPodURLHeader)
	}
}

func TestEvictionSettings(t *testing.T) {
	cases := []struct {
		name, file, hard, soft string
	}{
		{"subset replaces defaults", "evictionHard: {memory.available: 1Gi}\n", "memory.available<1Gi", ""},
		{"merge keeps other defaults", "mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 1Gi}\n",
			"imagefs.available<15%,memory.available<1Gi,nodefs.available<10%,nodefs.inodesFree<5%", ""},
		{"zero disables", "evictionHard: {memory.available: \"0\", nodefs.available: \"0%\", pid.available: 2.5%}\n", "pid.available<2.5%", ""},
		{"soft with grace", "evictionSoft: {memory.available: 500Mi}\nevictionSoftGracePeriod: {memory.available: 1m30s}\n",
			"imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%", "memory.available<500Mi"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustLoad(t, header+tc.file)
			if got := thresholds(c.EvictionHard); got != tc.hard {
				t.Errorf("hard = %s, want %s", got, tc.hard)
			}
			if got := thresholds(c.EvictionSoft); got != tc.soft {
				t.Errorf("soft = %s, want %s", got, tc.soft)
			}
			for _, th := range c.EvictionHard {
				if (th.Value.Quantity == nil) == (th.Value.Percentage == 0) {
					t.Errorf("threshold %+v: want exactly one of quantity/percentage", th)
				}
			}
			if len(c.EvictionSoft) > 0 && c.EvictionSoft[0].GracePeriod != 90*time.Second {
				t.Errorf("grace period %v", c.EvictionSoft[0].GracePeriod)
			}
		})
	}
	c := mustLoad(t, header+"evictionMinimumReclaim: {memory.available: 50Mi}\n")
	for _, th := range c.EvictionHard {
		if th.Signal == eviction.SignalMemoryAvailable && (th.MinReclaim == nil || th.MinReclaim.Quantity.String() != "50Mi") {
			t.Errorf("min reclaim not attached: %+v", th)
		}
	}
}

// Each bad input is rejected with the field (or flag) and the reason.
func TestInvalid(t *testing.T) {
	cases := []struct {
		name string
		file string // body after the header; "-" = no file
		args []string
		want []string
	}{
		{"gc high above 100", "imageGCHighThresholdPercent: 101\n", nil,
			[]string{"imageGCHighThresholdPercent: Invalid value: 101: must be between 0 and 100"}},
		{"gc low above high", "imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 75\n", nil,
			[]string{"imageGCLowThresholdPercent: Invalid value: 75: must be less than imageGCHighThresholdPercent (70)"}},
		{"gc low via flag", "-", []string{"--image-gc-low-threshold=90"},
			[]string{"imageGCLowThresholdPercent: Invalid value: 90"}},
		{"negative duration", "syncFrequency: -1s\n", nil, []string{`syncFrequency: Invalid value: "-1s": must be greater than or equal to 0`}},
		{"negative flag duration", "-", []string{"--file-check-frequency=-5s"}, []string{"fileCheckFrequency: Invalid value"}},
		{"bad eviction quantity", "evictionHard: {memory.available: lots}\n", nil, []string{`evictionHard[memory.available]: Invalid value: "lots"`}},
		{"bad eviction percent", "evictionHard: {nodefs.available: 120%}\n", nil, []string{"percentage must be between 0% and 100%"}},
		{"unknown signal", "evictionHard: {cpu.available: 10%}\n", nil, []string{`evictionHard[cpu.available]: Unsupported value: "cpu.available"`}},
		{"soft without grace", "evictionSoft: {memory.available: 1Gi}\n", nil, []string{"evictionSoftGracePeriod[memory.available]: Required value"}},
		{"bad reserved quantity", "kubeReserved: {memory: 1GB!}\n", nil, []string{`kubeReserved[memory]: Invalid value: "1GB!"`}},
		{"bad reserved name", "systemReserved: {gpu: \"1\"}\n", nil, []string{`systemReserved[gpu]: Unsupported value: "gpu"`}},
		{"negative reserved", "-", []string{"--system-reserved=cpu=-1"}, []string{"systemReserved[cpu]: Invalid value"}},
		{"cgroup driver", "cgroupDriver: docker\n", nil, []string{`cgroupDriver: Unsupported value: "docker"`}},
		{"relative cgroup root", "-", []string{"--cgroup-root=minilet"}, []string{"cgroupRoot: Invalid value"}},
		{"bad address", "address: localhost\n", nil, []string{`address: Invalid value: "localhost": must be an IP address`}},
		{"bad port", "-", []string{"--read-only-port=70000"}, []string{"readOnlyPort: Invalid value: 70000"}},
		{"pids", "podPidsLimit: -2\n", nil, []string{"podPidsLimit: Invalid value: -2"}},
		{"log files", "containerLogMaxFiles: 1\n", nil, []string{"containerLogMaxFiles: Invalid value: 1: must be greater than 1"}},
		{"log size", "containerLogMaxSize: big\n", nil, []string{`containerLogMaxSize: Invalid value: "big"`}},
		{"log monitor interval", "containerLogMonitorInterval: 1s\n", nil, []string{`containerLogMonitorInterval: Invalid value: "1s": must be at least 3s`}},
		{"quota period", "cpuCFSQuotaPeriod: 2s\n", nil, []string{"cpuCFSQuotaPeriod: Invalid value"}},
		{"node name", "-", []string{"--hostname-override=bad_name"}, []string{`--hostname-override: Invalid value: "bad_name"`}},
		{"node ip", "-", []string{"--node-ip=1.2.3"}, []string{"--node-ip: Invalid value"}},
		{"log level", "-", []string{"--log-level=loud"}, []string{`--log-level: Unsupported value: "loud"`}},
		{"url", "staticPodURL: ftp://x\n", nil, []string{"staticPodURL: Invalid value"}},
		{"several at once", "maxPods: -1\nimageGCHighThresholdPercent: 101\n", nil,
			[]string{"maxPods: Invalid value: -1", "imageGCHighThresholdPercent: Invalid value: 101"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := ""
			if tc.file != "-" {
				file = header + tc.file
			}
			_, err := load(t, file, tc.args...)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error is not InvalidArgument: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestStrictFile(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"unknown field", header + "maxPods: 10\nmaxPodz: 10\n", `unknown field "maxPodz"`},
		{"unknown nested field", header + "authentication: {anonymous: {enabeld: true}}\n", `unknown field "authentication.anonymous.enabeld"`},
		{"case matters", header + "MaxPods: 10\n", `unknown field "MaxPods"`},
		{"duplicate field", header + "maxPods: 10\nmaxPods: 11\n", "maxPods"},
		{"wrong kind", "apiVersion: v1\nkind: Pod\n", `apiVersion "v1" kind "Pod"`},
		{"missing kind", "maxPods: 10\n", "want apiVersion kubelet.config.k8s.io/v1beta1"},
		{"wrong type", header + "maxPods: many\n", "maxPods"},
		{"not yaml", header + "maxPods: [\n", "config file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.body)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kubelet.yaml") {
				t.Errorf("error %q should name the file and contain %q", err, tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("not InvalidArgument: %v", err)
			}
		})
	}

	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	var o Options
	AddFlags(fs, &o)
	o.ConfigFile = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := Load(&o, fs); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
}

func TestNewOptionsLoads(t *testing.T) {
	o := NewOptions()
	o.HostnameOverride = "n1"
	o.MaxPods = 3 // with no flag set, every Options field applies
	c, err := Load(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "n1" || c.MaxPods != 3 || c.RootDir != DefaultRootDir || c.ReadOnlyPort != DefaultReadOnlyPort {
		t.Fatalf("node %q maxPods %d root %q port %d", c.NodeName, c.MaxPods, c.RootDir, c.ReadOnlyPort)
	}
	if got := thresholds(c.EvictionHard); got != "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%" {
		t.Fatalf("eviction defaults lost: %s", got)
	}
}

// --config is read within MaxConfigFileSize and only if it is a regular
// file: /dev/zero, a FIFO or a directory are refused at once with the
// file's name, where /dev/zero once made the agent read 3.6 GB.
func TestConfigFileThatIsNotABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "kubelet.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(header+"# "+strings.Repeat("x", MaxConfigFileSize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "config file /dev/zero: not a regular file: a character device",
		fifo:        "config file " + fifo + ": not a regular file: a named pipe (FIFO)",
		dir:         "config file " + dir + ": not a regular file: a directory",
		big:         "config file " + big + ": file is 1048648 bytes, larger than the limit of 1 MiB",
	} {
		o := NewOptions()
		o.ConfigFile = path
		start := time.Now()
		_, err := Load(o, pflag.NewFlagSet("x", pflag.ContinueOnError))
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: Load took %v", path, took)
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s: Load error = %v; want %q", path, err, want)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: error is not InvalidArgument: %v", path, err)
		}
	}
}

// seccompDefault comes from the file or --seccomp-default, the flag winning.
func TestSeccompDefault(t *testing.T) {
	file := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nseccompDefault: true\n"
	if c := mustLoad(t, file); !c.SeccompDefault {
		t.Error("seccompDefault: true in the file was not taken")
	}
	if c := mustLoad(t, file, "--seccomp-default=false"); c.SeccompDefault {
		t.Error("--seccomp-default=false did not override the file")
	}
	if c := mustLoad(t, "", "--seccomp-default"); !c.SeccompDefault {
		t.Error("--seccomp-default was not taken")
	}
}

func TestKubeletFlagNamesAndDeprecatedAliases(t *testing.T) {
	file := header + "imageMinimumGCAge: 7m\n"
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 7 * time.Minute},
		{[]string{"--minimum-image-gc-age=3m"}, 3 * time.Minute},
		{[]string{"--image-minimum-gc-age=4m"}, 4 * time.Minute}, // the old name still overrides the file
	} {
		c, err := load(t, file, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if c.ImageMinimumGCAge != tc.want {
			t.Errorf("%v: ImageMinimumGCAge = %s, want %s", tc.args, c.ImageMinimumGCAge, tc.want)
		}
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs, &Options{})
	if f := fs.Lookup("image-minimum-gc-age"); f == nil || f.Deprecated == "" || !f.Hidden {
		t.Errorf("--image-minimum-gc-age should be a hidden deprecated alias: %+v", f)
	}
}

// The per-reason spam key is minilet's own opt-in: off unless
// --event-spam-key-per-reason is given.
func TestEventSpamKeyPerReason(t *testing.T) {
	if c := mustLoad(t, ""); c.EventSpamKeyPerReason {
		t.Error("EventSpamKeyPerReason is on by default; the default must key the spam filter as client-go's")
	}
	if c := mustLoad(t, "", "--"+FlagEventSpamKeyPerReason); !c.EventSpamKeyPerReason {
		t.Error("--event-spam-key-per-reason was not taken")
	}
	if c := mustLoad(t, "", "--event-spam-key-per-reason=false"); c.EventSpamKeyPerReason {
		t.Error("--event-spam-key-per-reason=false was not taken")
	}
	if NewOptions().EventSpamKeyPerReason {
		t.Error("NewOptions defaults EventSpamKeyPerReason to true")
	}
}

// failSwapOn: the kubelet's true in cluster mode, false standalone (an edge
// box or laptop with swap still runs its pods), and what the file or the
// flag says wins.
func TestFailSwapOnDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		args []string
		want bool
	}{
		{"standalone", "", nil, false},
		{"cluster", "", []string{"--kubeconfig=/k"}, true},
		{"cluster, flag off", "", []string{"--kubeconfig=/k", "--fail-swap-on=false"}, false},
		{"standalone, file on", header + "failSwapOn: true\n", nil, true},
		{"cluster, file off", header + "failSwapOn: false\n", []string{"--kubeconfig=/k"}, false},
	} {
		if got := mustLoad(t, tc.file, tc.args...).FailSwapOn; got != tc.want {
			t.Errorf("%s: FailSwapOn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Graceful node shutdown's fields, validated as the kubelet's.
func TestShutdownGracePeriods(t *testing.T) {
	c := mustLoad(t, header+"shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n")
	if c.ShutdownGracePeriod != 30*time.Second || c.ShutdownGracePeriodCriticalPods != 10*time.Second {
		t.Errorf("periods %s %s", c.ShutdownGracePeriod, c.ShutdownGracePeriodCriticalPods)
	}
	c = mustLoad(t, header+"shutdownGracePeriodByPodPriority:\n- {priority: 0, shutdownGracePeriodSeconds: 20}\n- {priority: 100000, shutdownGracePeriodSeconds: 5}\n")
	if len(c.ShutdownGracePeriodByPodPriority) != 2 || c.ShutdownGracePeriodByPodPriority[1] != (ShutdownPriorityPeriod{100000, 5 * time.Second}) {
		t.Errorf("by priority %+v", c.ShutdownGracePeriodByPodPriority)
	}
	for file, want := range map[string]string{
		header + "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n":                                               "shutdownGracePeriodCriticalPods",
		header + "shutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority:\n- {priority: 0, shutdownGracePeriodSeconds: 20}\n": "shutdownGracePeriodByPodPriority",
	} {
		if _, err := load(t, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", file, err, want)
		}
	}
}
