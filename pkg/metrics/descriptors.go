package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxDescriptorSeries is how many descriptor label values
// tokengate_descriptor_decisions_total keeps per domain and rule for the
// life of the process; the values after them are counted as
// DescriptorOther. It bounds the only label whose values come from
// requests: the series of a rule are at most MaxDescriptorSeries+1 times
// the results.
const MaxDescriptorSeries = 100

// DescriptorOther is the descriptor label of the values beyond
// MaxDescriptorSeries.
const DescriptorOther = "_other_"

// descriptorSeries remembers the descriptor label values given out, per
// domain and rule.
type descriptorSeries struct {
	vec  *prometheus.CounterVec // domain, rule, descriptor, result
	mu   sync.Mutex
	seen map[[2]string]map[string]struct{}
}

func newDescriptorSeries() *descriptorSeries {
	return &descriptorSeries{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokengate_descriptor_decisions_total",
			Help: "Descriptor decisions of the rules that ask for them by descriptor (the reference's detailed_metric and value_to_metric), by domain, rule, descriptor and result; at most 100 descriptor values per rule, the rest as _other_.",
		}, []string{"domain", "rule", "descriptor", "result"}),
		seen: make(map[[2]string]map[string]struct{}),
	}
}

// CountDescriptor counts one decision of a rule that asks for metrics by
// descriptor. Safe for concurrent use.
func (m *Metrics) CountDescriptor(domain, rule, descriptor, result string) {
	d := m.descriptors
	key := [2]string{domain, rule}
	d.mu.Lock()
	seen := d.seen[key]
	if seen == nil {
		seen = make(map[string]struct{})
		d.seen[key] = seen
	}
	if _, ok := seen[descriptor]; !ok {
		if len(seen) >= MaxDescriptorSeries {
			descriptor = DescriptorOther
		} else {
			seen[descriptor] = struct{}{}
		}
	}
	d.mu.Unlock()
	d.vec.WithLabelValues(domain, rule, descriptor, result).Inc()
}
