// Package telemetry sets up OpenTelemetry tracing and the Prometheus
// metrics the service exposes at /metrics. Traces are exported over
// OTLP/HTTP only when OTEL_EXPORTER_OTLP_ENDPOINT (or the traces-specific
// variable) is set; otherwise spans are created (so trace ids still reach
// logs and the operations log) but nothing is exported.
package telemetry

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Setup installs the global tracer provider and propagator (the OTel API
// is designed around one per process) and returns a shutdown function that
// flushes pending spans.
func Setup(ctx context.Context, getenv func(string) string) (func(context.Context) error, error) {
	opts := []sdktrace.TracerProviderOption{}
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// Metrics holds the service's Prometheus collectors on its own registry.
type Metrics struct {
	Registry        *prometheus.Registry
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	OpDuration      *prometheus.HistogramVec
	// Uploads is the uploads in progress (tar worktrees, object packs,
	// git pushes): how close the server is to --max-concurrent-uploads.
	Uploads prometheus.Gauge
	// Runs are the five run metrics, updated from the run reports this
	// replica receives (POST /repos/{ws}/runs; runs.go).
	Runs *RunMetrics
}

// NewMetrics registers the collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstep_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockstep_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		OpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockstep_operation_duration_seconds", Help: "Latency of domain operations (push, rollback, merge, checkpoint, restore …) by operation and result.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"op", "result"}),
		Uploads: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstep_uploads_in_progress", Help: "Uploads (tar worktrees, object packs, git pushes) being served; at --max-concurrent-uploads further ones are answered 503.",
		}),
	}
	reg.MustRegister(m.Requests, m.RequestDuration, m.OpDuration, m.Uploads)
	m.Runs = newRunMetrics(reg)
	return m
}

// ObserveOp records one domain operation's latency.
func (m *Metrics) ObserveOp(op, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.OpDuration.WithLabelValues(op, result).Observe(d.Seconds())
}

// TraceID returns the trace id of ctx's span ("" without one); it is
// recorded in logs and operations-log entries.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// Millis converts a duration to fractional milliseconds for reports.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
