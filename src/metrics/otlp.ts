import type { CollectedFamily } from './registry';

/**
 * The gateway's metrics as an OTLP/HTTP export request in its JSON encoding
 * (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding): the same figures GET /metrics
 * writes, cumulative since `startMs` (counters as monotonic sums, gauges as gauges, histograms with
 * their explicit bounds and each bucket's own count). As the encoding has it, 64-bit integers
 * (times in nanoseconds, counts) are strings and enums are numbers.
 */

/** AGGREGATION_TEMPORALITY_CUMULATIVE. */
const CUMULATIVE = 2;

const nanos = (ms: number) => `${Math.round(ms)}000000`;

export function otlpMetricsRequest(
  families: CollectedFamily[],
  times: { startMs: number; nowMs: number },
  resource: Record<string, string>,
): object {
  const startTimeUnixNano = nanos(times.startMs);
  const timeUnixNano = nanos(times.nowMs);
  const attributes = (labels: Record<string, string>) =>
    Object.entries(labels).map(([key, value]) => ({ key, value: { stringValue: value } }));
  const metrics = families
    .filter((family) => family.series.length > 0)
    .map((family) => {
      const points = family.series.map((series) => {
        const point = { attributes: attributes(series.labels), startTimeUnixNano, timeUnixNano };
        if ('value' in series) return { ...point, asDouble: series.value };
        const { bounds, counts, sum, count } = series.histogram;
        return { ...point, count: String(count), sum, bucketCounts: counts.map(String), explicitBounds: bounds };
      });
      const described = { name: family.name, description: family.help };
      switch (family.type) {
        case 'counter':
          return { ...described, sum: { aggregationTemporality: CUMULATIVE, isMonotonic: true, dataPoints: points } };
        case 'gauge':
          return { ...described, gauge: { dataPoints: points } };
        case 'histogram':
          return { ...described, histogram: { aggregationTemporality: CUMULATIVE, dataPoints: points } };
      }
    });
  return {
    resourceMetrics: [
      {
        resource: { attributes: attributes(resource) },
        scopeMetrics: [{ scope: { name: 'assistants-gateway' }, metrics }],
      },
    ],
  };
}
