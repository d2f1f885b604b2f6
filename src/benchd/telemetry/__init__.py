"""Making measurements visible: Prometheus instruments and exposition, OpenTelemetry traces and metrics."""
