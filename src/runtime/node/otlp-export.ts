import type { Config } from '../../config';
import type { Metrics } from '../../metrics/gateway';
import { otlpMetricsRequest } from '../../metrics/otlp';

/** The resource the exported metrics describe. */
const RESOURCE = { 'service.name': 'assistants-gateway' };

/**
 * One OTLP/HTTP export of the process's metrics to OTEL_EXPORTER_OTLP_ENDPOINT's `v1/metrics`
 * (its path kept, as the OpenTelemetry specification says), or null when that is unset. The figures
 * are cumulative from `startMs`. An export that is not answered 2xx within the interval throws,
 * naming the status only: the headers may hold a collector's credentials.
 */
export function otlpExport(
  config: Pick<Config, 'OTEL_EXPORTER_OTLP_ENDPOINT' | 'OTEL_EXPORTER_OTLP_HEADERS' | 'OTEL_METRIC_EXPORT_INTERVAL'>,
  metrics: Pick<Metrics, 'collect'>,
  startMs: number,
): (() => Promise<void>) | null {
  const endpoint = config.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return null;
  const url = new URL('v1/metrics', endpoint.endsWith('/') ? endpoint : `${endpoint}/`);
  return async () => {
    const families = await metrics.collect();
    if (!families) return;
    const response = await fetch(url, {
      method: 'POST',
      headers: { ...config.OTEL_EXPORTER_OTLP_HEADERS, 'content-type': 'application/json' },
      body: JSON.stringify(otlpMetricsRequest(families, { startMs, nowMs: Date.now() }, RESOURCE)),
      signal: AbortSignal.timeout(config.OTEL_METRIC_EXPORT_INTERVAL),
    });
    await response.body?.cancel();
    if (!response.ok) throw new Error(`The OTLP collector answered ${response.status}.`);
  };
}
