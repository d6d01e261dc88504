package qos

// CFS and share constants the kubelet uses.
const (
	// MinShares is the smallest cpu.shares value the kernel accepts; pods
	// and containers without a cpu request get it.
	MinShares = 2
	// MaxShares is the largest cpu.shares value the kernel accepts.
	MaxShares = 262144
	// SharesPerCPU is cpu.shares for one whole CPU.
	SharesPerCPU = 1024
	// DefaultCFSPeriod is the CFS period in microseconds (100 ms).
	DefaultCFSPeriod = 100000
	// MinCFSQuota is the smallest CFS quota in microseconds the kubelet sets.
	MinCFSQuota = 1000
	// NoQuota is the CFS quota that means "unlimited".
	NoQuota = -1
)

// MilliCPUToShares converts a cpu request in millicores to cpu.shares:
// milli*1024/1000 clamped to [MinShares, MaxShares]; no request gives
// MinShares.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU <= 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / 1000
	switch {
	case shares < MinShares:
		return MinShares
	case shares > MaxShares:
		return MaxShares
	}
	return uint64(shares)
}

// MilliCPUToQuota converts a cpu limit in millicores to a CFS quota for the
// given period (µs): milli*period/1000 with a floor of MinCFSQuota. No limit
// (milliCPU <= 0) gives NoQuota.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU <= 0 {
		return NoQuota
	}
	quota := milliCPU * period / 1000
	if quota < MinCFSQuota {
		return MinCFSQuota
	}
	return quota
}
