package serve

// The daemon's own metrics, beside serve/metrics' mirror of the sample:
// device health and the health of the daemon's loop, history writes and
// alert deliveries.

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vramhq/vram/serve/alert"
)

var (
	descHealthy       = prometheus.NewDesc("vram_gpu_healthy", "1 when the GPU's queries succeed and no Xid error was received recently, else 0.", []string{"gpu", "UUID", "modelName", "Hostname"}, nil)
	descSamples       = prometheus.NewDesc("vram_daemon_samples_total", "Samples taken by the daemon.", nil, nil)
	descSampleFails   = prometheus.NewDesc("vram_daemon_sample_failures_total", "Samples in which no GPU could be read.", nil, nil)
	descOverruns      = prometheus.NewDesc("vram_daemon_sample_overruns_total", "Samples whose processing took longer than the sample interval.", nil, nil)
	descHistoryTicks  = prometheus.NewDesc("vram_history_ticks_written_total", "History ticks committed to the database.", nil, nil)
	descHistoryDrops  = prometheus.NewDesc("vram_history_ticks_dropped_total", "History ticks dropped because the writes were behind.", nil, nil)
	descHistoryFails  = prometheus.NewDesc("vram_history_write_failures_total", "Writes to the history database that failed.", nil, nil)
	descEventDrops    = prometheus.NewDesc("vram_events_dropped_total", "Live events not delivered to a slow subscriber.", nil, nil)
	descNotifications = prometheus.NewDesc("vram_alert_notifications_total", "Alert deliveries to webhooks, by result (sent, failed, retried, dropped).", []string{"result"}, nil)
)

// selfCollector exposes the daemon's own metrics. Collect reads atomics
// and the published State only, so it never waits for the sampling loop.
type selfCollector struct{ d *Daemon }

func (c selfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHealthy, descSamples, descSampleFails, descOverruns, descHistoryTicks, descHistoryDrops, descHistoryFails, descEventDrops, descNotifications} {
		ch <- d
	}
}

func (c selfCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	if s, ok := d.State(); ok {
		for _, dev := range s.Devices {
			v := 0.0
			if dev.Healthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, v, strconv.Itoa(dev.Index), dev.UUID, dev.Name, d.hostname)
		}
	}
	counter := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	counter(descSamples, d.ticks.Load())
	counter(descSampleFails, d.sampleErr.Load())
	counter(descOverruns, d.overruns.Load())
	counter(descHistoryTicks, d.w.ticks.Load())
	counter(descHistoryDrops, d.w.dropped.Load())
	counter(descHistoryFails, d.w.failed.Load())
	counter(descEventDrops, d.hub.dropped.Load())
	var st alert.Stats
	add := func(n *alert.Notifier) {
		if n == nil {
			return
		}
		s := n.Stats()
		st.Sent, st.Failed, st.Retried, st.Dropped = st.Sent+s.Sent, st.Failed+s.Failed, st.Retried+s.Retried, st.Dropped+s.Dropped
	}
	add(d.notifier.Load())
	d.retiredMu.Lock()
	for _, n := range d.retired {
		add(n)
	}
	d.retiredMu.Unlock()
	for _, r := range []struct {
		name string
		v    uint64
	}{{"sent", st.Sent}, {"failed", st.Failed}, {"retried", st.Retried}, {"dropped", st.Dropped}} {
		ch <- prometheus.MustNewConstMetric(descNotifications, prometheus.CounterValue, float64(r.v), r.name)
	}
}
