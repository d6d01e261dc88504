package qos

// ReservedMemoryLimits applies --qos-reserved=memory=percent: the
// burstable tier may use allocatable minus percent of the Guaranteed pods'
// memory requests, and the besteffort tier additionally leaves percent of the
// Burstable pods' requests. The raw formula results are returned; the
// caller decides how to treat values below the current usage.
func ReservedMemoryLimits(allocatable, guaranteedRequests, burstableRequests, percent int64) (burstable, bestEffort int64) {
	burstable = allocatable - guaranteedRequests*percent/100
	bestEffort = burstable - burstableRequests*percent/100
	return burstable, bestEffort
}
