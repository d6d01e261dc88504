package cli

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func newTopCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top pods|node",
		Short: "Show CPU and memory usage from the agent's stats summary, like kubectl top",
	}
	var namespace string
	pods := &cobra.Command{
		Use:     "pods",
		Aliases: []string{"pod", "po"},
		Short:   "CPU (cores) and memory (working set) per pod",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sum, err := fetch[statsapi.Summary](cmd, e, "/stats/summary", "")
			if err != nil {
				return err
			}
			return printTopPods(cmd.OutOrStdout(), sum.Pods, namespace)
		},
	}
	pods.Flags().StringVarP(&namespace, "namespace", "n", "", "only pods of this namespace (default: all)")
	node := &cobra.Command{
		Use:     "node",
		Aliases: []string{"nodes", "no"},
		Short:   "CPU and memory usage of the node, also as a share of allocatable",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sum, err := fetch[statsapi.Summary](cmd, e, "/stats/summary", "")
			if err != nil {
				return err
			}
			n, err := fetch[v1.Node](cmd, e, "/node", "")
			if err != nil {
				return err
			}
			return printTopNode(cmd.OutOrStdout(), &sum.Node, n)
		},
	}
	cmd.AddCommand(pods, node)
	return cmd
}

// cpuMilli returns usage in millicores, or -1 when unknown.
func cpuMilli(s *statsapi.CPUStats) int64 {
	if s == nil || s.UsageNanoCores == nil {
		return -1
	}
	return int64(*s.UsageNanoCores / uint64(time.Millisecond))
}

// memBytes returns the working set, or -1 when unknown.
func memBytes(s *statsapi.MemoryStats) int64 {
	if s == nil || s.WorkingSetBytes == nil {
		return -1
	}
	return int64(*s.WorkingSetBytes)
}

func fmtCPU(m int64) string {
	if m < 0 {
		return "<unknown>"
	}
	return fmt.Sprintf("%dm", m)
}

func fmtMem(b int64) string {
	if b < 0 {
		return "<unknown>"
	}
	return fmt.Sprintf("%dMi", b/(1024*1024))
}

// podUsage sums container usage when the pod-level figure is missing.
func podUsage(p *statsapi.PodStats) (cpu, mem int64) {
	cpu, mem = cpuMilli(p.CPU), memBytes(p.Memory)
	if cpu < 0 || mem < 0 {
		var c, m int64 = -1, -1
		for _, ct := range p.Containers {
			if v := cpuMilli(ct.CPU); v >= 0 {
				c = max(c, 0) + v
			}
			if v := memBytes(ct.Memory); v >= 0 {
				m = max(m, 0) + v
			}
		}
		if cpu < 0 {
			cpu = c
		}
		if mem < 0 {
			mem = m
		}
	}
	return cpu, mem
}

func printTopPods(w io.Writer, pods []statsapi.PodStats, namespace string) error {
	var sel []statsapi.PodStats
	for _, p := range pods {
		if namespace == "" || p.PodRef.Namespace == namespace {
			sel = append(sel, p)
		}
	}
	if len(sel) == 0 {
		_, err := fmt.Fprintln(w, "No resources found.")
		return err
	}
	sort.Slice(sel, func(i, j int) bool {
		if sel[i].PodRef.Namespace != sel[j].PodRef.Namespace {
			return sel[i].PodRef.Namespace < sel[j].PodRef.Namespace
		}
		return sel[i].PodRef.Name < sel[j].PodRef.Name
	})
	tw := newTable(w)
	row(tw, "NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)")
	for i := range sel {
		cpu, mem := podUsage(&sel[i])
		row(tw, sel[i].PodRef.Namespace, sel[i].PodRef.Name, fmtCPU(cpu), fmtMem(mem))
	}
	return tw.Flush()
}

func printTopNode(w io.Writer, s *statsapi.NodeStats, n *v1.Node) error {
	cpu, mem := cpuMilli(s.CPU), memBytes(s.Memory)
	cpuPct, memPct := "<unknown>", "<unknown>"
	if q, ok := n.Status.Allocatable[v1.ResourceCPU]; ok && cpu >= 0 && q.MilliValue() > 0 {
		cpuPct = fmt.Sprintf("%d%%", cpu*100/q.MilliValue())
	}
	if q, ok := n.Status.Allocatable[v1.ResourceMemory]; ok && mem >= 0 && q.Value() > 0 {
		memPct = fmt.Sprintf("%d%%", mem*100/q.Value())
	}
	name := s.NodeName
	if name == "" {
		name = n.Name
	}
	tw := newTable(w)
	row(tw, "NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)")
	row(tw, name, fmtCPU(cpu), cpuPct, fmtMem(mem), memPct)
	return tw.Flush()
}
