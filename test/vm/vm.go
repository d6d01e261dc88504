package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// qemuBinary runs the machine.
const qemuBinary = "qemu-system-x86_64"

// Defaults of a Job's zero fields.
const (
	DefaultTimeout  = 5 * time.Minute
	DefaultMemoryMB = 1024
	DefaultCPUs     = 2
	DefaultDiskMB   = 256
)

// Job is what one machine does between boot and power-off.
type Job struct {
	// Script is run by bash as root in the guest, in /job, once systemd has
	// finished booting (systemctl is-system-running says running), with no
	// stdin and $OUT set to a directory whose files come back to the host.
	Script string
	// Files are copied into the guest before the script runs: host path (a
	// file or a directory tree; relative to the test's working directory)
	// to absolute guest path. Modes and owners are kept.
	Files map[string]string
	// Timeout bounds the whole run, boot to power-off (DefaultTimeout if
	// zero); past it qemu is killed and the test fails with the console.
	Timeout time.Duration
	// MemoryMB and CPUs size the machine (DefaultMemoryMB, DefaultCPUs).
	MemoryMB, CPUs int
	// DiskMB is the room on the job disk for what the script writes to
	// $OUT, its stdout and its stderr (DefaultDiskMB).
	DiskMB int
}

// Result is what a job left behind. Its files live in the test's temporary
// directory, removed when the test ends.
type Result struct {
	// ExitCode is the script's exit status.
	ExitCode int
	// Stdout and Stderr are the script's output.
	Stdout, Stderr string
	// Files maps each regular file the script left in $OUT, by its path
	// relative to $OUT, to its copy on the host.
	Files map[string]string
	// OutDir is the host's copy of $OUT.
	OutDir string
	// Console is the serial console: the kernel's and systemd's messages
	// and vm-job's own.
	Console string
	// Duration is qemu's wall time: boot, job and power-off.
	Duration time.Duration
}

// Run boots a machine, runs job in it and returns once the machine has
// powered off. It skips the test when not root or when qemu cannot run here,
// and fails it (with the console's last lines) when the machine does not
// boot, the job leaves no exit code or the machine outlives job.Timeout. A
// script's non-zero exit is the caller's to judge.
func Run(t testing.TB, job Job) Result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("test/vm: needs root (the image build, mkfs.ext4 -d of the job's files); CI runs as root")
	}
	img, err := getImage(t)
	if err != nil {
		if _, lerr := exec.LookPath(qemuBinary); lerr != nil {
			t.Skipf("test/vm: qemu cannot run here (%v): %v", lerr, err)
		}
		t.Fatalf("test/vm: %v", err)
	}
	if out, err := exec.Command(qemuBinary, "-version").CombinedOutput(); err != nil {
		t.Skipf("test/vm: qemu cannot run here: %s -version: %v: %s", qemuBinary, err, bytes.TrimSpace(out))
	}
	res, err := run(t.TempDir(), img, job)
	if err != nil {
		t.Fatalf("test/vm: %v", err)
	}
	t.Logf("test/vm: boot, job and power-off in %s (exit code %d)", res.Duration.Round(100*time.Millisecond), res.ExitCode)
	return res
}

// run does Run's work in dir: stages the job disk, boots, reads the disk back.
func run(dir string, img image, job Job) (Result, error) {
	if job.Timeout == 0 {
		job.Timeout = DefaultTimeout
	}
	if job.MemoryMB == 0 {
		job.MemoryMB = DefaultMemoryMB
	}
	if job.CPUs == 0 {
		job.CPUs = DefaultCPUs
	}
	if job.DiskMB == 0 {
		job.DiskMB = DefaultDiskMB
	}
	disk := filepath.Join(dir, "job.img")
	if err := makeJobDisk(filepath.Join(dir, "in"), disk, job); err != nil {
		return Result{}, err
	}
	console := filepath.Join(dir, "console.log")
	dur, qerr := boot(img, disk, console, job)
	b, err := os.ReadFile(console)
	if err != nil && qerr == nil {
		qerr = fmt.Errorf("reading the console log: %w", err)
	}
	res := Result{Console: string(b), Duration: dur}
	if qerr != nil {
		return res, fmt.Errorf("%w\n%s", qerr, consoleTail(res.Console))
	}
	if err := readJobDisk(disk, filepath.Join(dir, "result"), &res); err != nil {
		return res, fmt.Errorf("%w\n%s", err, consoleTail(res.Console))
	}
	return res, nil
}

// makeJobDisk stages the job in stage (run.sh, files/<guest path>) and
// makes the ext4 image disk of it, big enough for it and job.DiskMB more.
func makeJobDisk(stage, disk string, job Job) error {
	if err := os.MkdirAll(filepath.Join(stage, "files"), 0o755); err != nil {
		return fmt.Errorf("staging the job: %w", err)
	}
	if err := os.WriteFile(filepath.Join(stage, "run.sh"), []byte(job.Script), 0o755); err != nil {
		return fmt.Errorf("staging the job: %w", err)
	}
	for host, guest := range job.Files {
		if !filepath.IsAbs(guest) {
			return fmt.Errorf("staging the job: guest path %q of %s is not absolute", guest, host)
		}
		dst := filepath.Join(stage, "files", filepath.Clean(guest))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("staging the job: %w", err)
		}
		if out, err := exec.Command("cp", "-a", "--reflink=auto", host, dst).CombinedOutput(); err != nil {
			return fmt.Errorf("staging the job: copying %s to %s: %w: %s", host, guest, err, bytes.TrimSpace(out))
		}
	}
	size, err := treeSize(stage)
	if err != nil {
		return fmt.Errorf("staging the job: %w", err)
	}
	mb := size*5/4>>20 + int64(job.DiskMB) + 16 // ext4's own overhead, a margin
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "job", "-d", stage, disk, strconv.FormatInt(mb, 10)+"M").CombinedOutput()
	if err != nil {
		return fmt.Errorf("making the job disk: mkfs.ext4 -d %s: %w: %s", stage, err, bytes.TrimSpace(out))
	}
	return nil
}

// treeSize adds up the sizes of the files below dir.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			info, err := e.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// boot runs qemu until the guest powers off or job.Timeout passes (qemu is
// then killed), the console going to the file console.
func boot(img image, disk, console string, job Job) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), job.Timeout)
	defer cancel()
	accel := os.Getenv("MINILET_VM_ACCEL")
	if accel == "" {
		accel = "tcg"
	}
	args := []string{"-n", "10", qemuBinary,
		"-accel", accel, "-cpu", "max",
		"-m", strconv.Itoa(job.MemoryMB), "-smp", strconv.Itoa(job.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
		"-no-reboot", // a reboot or a kernel panic (panic=-1) ends qemu too
		"-kernel", img.kernel, "-initrd", img.initrd, "-append", img.cmdline,
		// snapshot=on: the guest's writes go to a temporary file, never the cache.
		"-drive", "file=" + img.rootfs + ",format=raw,if=virtio,snapshot=on",
		"-drive", "file=" + disk + ",format=raw,if=virtio",
		"-serial", "file:" + console,
	}
	// nice execs qemu: killing the command kills qemu.
	cmd := exec.CommandContext(ctx, "nice", args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Dir(disk)) // snapshot=on's file
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	dur := time.Since(start)
	switch {
	case ctx.Err() != nil:
		return dur, fmt.Errorf("the machine did not power off within %s: qemu killed%s", job.Timeout, qemuSaid(stderr.Bytes()))
	case err != nil:
		return dur, fmt.Errorf("qemu: %w%s", err, qemuSaid(stderr.Bytes()))
	}
	return dur, nil
}

// qemuSaid is qemu's own output, if any, for an error message.
func qemuSaid(b []byte) string {
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return ""
	}
	return "; qemu said: " + string(b)
}

// readJobDisk copies the job disk's out/ to dir/out with debugfs and fills
// res from it.
func readJobDisk(disk, dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("reading the job disk: %w", err)
	}
	out, err := exec.Command("debugfs", "-R", "rdump /out "+dir, disk).CombinedOutput()
	if err != nil {
		return fmt.Errorf("reading the job disk: debugfs rdump: %w: %s", err, bytes.TrimSpace(out))
	}
	res.OutDir = filepath.Join(dir, "out", "files")
	code, err := os.ReadFile(filepath.Join(dir, "out", "exit-code"))
	if err != nil {
		return fmt.Errorf("the job left no exit code (it did not run, or the machine went down before it ended): %w", err)
	}
	if res.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(code))); err != nil {
		return fmt.Errorf("the job's exit code: %w", err)
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"stdout", &res.Stdout}, {"stderr", &res.Stderr}} {
		b, err := os.ReadFile(filepath.Join(dir, "out", f.name))
		if err != nil {
			return fmt.Errorf("the job's %s: %w", f.name, err)
		}
		*f.to = string(b)
	}
	res.Files = map[string]string{}
	err = filepath.WalkDir(res.OutDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			rel, err := filepath.Rel(res.OutDir, path)
			if err != nil {
				return err
			}
			res.Files[rel] = path
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing the job's files: %w", err)
	}
	return nil
}

// ansi matches the terminal escapes systemd colours its status lines with.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")

// consoleTail is the end of the console log, for an error message.
func consoleTail(console string) string {
	lines := strings.Split(strings.TrimRight(ansi.ReplaceAllString(console, ""), "\n"), "\n")
	const n = 60
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "console (last lines):\n" + strings.Join(lines, "\n")
}
