package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracing is what serve traces with: nothing (the zero value) while
// tracing is off.
type tracing struct {
	tracer     trace.Tracer                  // service.Options.Tracer
	propagator propagation.TextMapPropagator // server.Options.Propagator
	shutdown   func(context.Context) error   // flushes the spans not yet sent
}

// Environment variables of the OTLP exporter that turn tracing on when
// --otlp-endpoint is not set (the exporter reads them, and the other
// OTEL_EXPORTER_OTLP_* ones, itself).
var otlpEndpointEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// checkOTLPEndpoint refuses an --otlp-endpoint that is not an http or
// https URL with a host.
func checkOTLPEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--otlp-endpoint %q: want http://host:port (plain) or https://host:port (TLS)", endpoint)
	}
	return nil
}

// startTracing starts the OTLP gRPC exporter when an endpoint is set: the
// setting, else the standard environment. Spans are batched; the sampler
// is the SDK's (parent-based, always on for a root: Envoy's decision
// stands), which OTEL_TRACES_SAMPLER changes. The propagator reads W3C
// trace context and baggage.
func startTracing(ctx context.Context, endpoint, version string) (tracing, error) {
	var opts []otlptracegrpc.Option
	switch {
	case endpoint != "":
		opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
	case !anyEnv(otlpEndpointEnv):
		return tracing{shutdown: func(context.Context) error { return nil }}, nil
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return tracing{}, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// The environment's resource (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES) overrides tokengate's own.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "tokengate"), attribute.String("service.version", version)),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return tracing{}, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tracing{
		tracer:     tp.Tracer("github.com/tokengate/tokengate"),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		shutdown: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return tp.Shutdown(ctx)
		},
	}, nil
}

func anyEnv(names []string) bool {
	for _, n := range names {
		if os.Getenv(n) != "" {
			return true
		}
	}
	return false
}
