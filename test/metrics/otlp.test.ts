import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config';
import { gatewayMetrics } from '../../src/metrics/gateway';
import { otlpExport } from '../../src/runtime/node/otlp-export';
import { startGatewayProcess } from '../support/processes';
import { waitFor } from '../support/wait';

/**
 * The OTLP/HTTP export as an operator meets it: `npm start`'s build with OTEL_EXPORTER_OTLP_ENDPOINT
 * set, a collector written here on the loopback receiving what it sends, JSON-encoded.
 */

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** An OTLP JSON data point, as far as these checks read it. */
interface Point {
  attributes: { key: string; value: { stringValue: string } }[];
  timeUnixNano: string;
  startTimeUnixNano: string;
  asDouble?: number;
  count?: string;
  sum?: number;
  bucketCounts?: string[];
  explicitBounds?: number[];
}
interface Metric {
  name: string;
  description: string;
  sum?: { aggregationTemporality: number; isMonotonic: boolean; dataPoints: Point[] };
  gauge?: { dataPoints: Point[] };
  histogram?: { aggregationTemporality: number; dataPoints: Point[] };
}
interface ExportRequest {
  resourceMetrics: {
    resource: { attributes: Point['attributes'] };
    scopeMetrics: { scope: { name: string }; metrics: Metric[] }[];
  }[];
}

const SECRET = 'collector-secret-0123456789';
const received: Received[] = [];
let refusing = true;
let collector: Server;
let collectorUrl: string;
let dataDir: string;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'gateway-otlp-'));
  collector = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      received.push({ path: request.url ?? '', headers: request.headers, body });
      // Exports are refused until the gateway has logged one refusal (an export it gave up on past
      // its interval, on a loaded machine, logs no status); then accepted, and exporting goes on.
      response.writeHead(refusing ? 503 : 200, { 'content-type': 'application/json' });
      response.end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  collectorUrl = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => collector.close(resolve));
  rmSync(dataDir, { recursive: true, force: true });
});

const metricsOf = (request: Received): Metric[] =>
  (JSON.parse(request.body) as ExportRequest).resourceMetrics.flatMap((resource) =>
    resource.scopeMetrics.flatMap((scope) => scope.metrics),
  );
const label = (point: Point, key: string) => point.attributes.find((one) => one.key === key)?.value.stringValue;

describe('OTLP/HTTP export', () => {
  it('is off unless OTEL_EXPORTER_OTLP_ENDPOINT is set', () => {
    expect(otlpExport(parseConfig({}), gatewayMetrics(), Date.now())).toBeNull();
  });

  it("sends the process's metrics to the collector every interval, with its headers, and logs a refused export without them", async () => {
    const gateway = await startGatewayProcess({
      DATA_DIR: dataDir,
      OTEL_EXPORTER_OTLP_ENDPOINT: `${collectorUrl}/otlp`,
      OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${SECRET}, x-scope = gateway`,
      OTEL_METRIC_EXPORT_INTERVAL: '200',
    });
    const output = () => gateway.stdout() + gateway.stderr();
    try {
      const refused = await waitFor(output, (text) => /OTLP metrics export failed.*503/.test(text));
      expect(refused).toMatch(/OTLP metrics export failed.*503/);
      refusing = false;
      for (let i = 0; i < 3; i++) expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      const healthCount = (request: Received) =>
        metricsOf(request)
          .find((metric) => metric.name === 'gateway_http_requests_total')
          ?.sum?.dataPoints.filter((point) => label(point, 'route') === '/health')
          .reduce((sum, point) => sum + (point.asDouble ?? 0), 0) ?? 0;
      const last = await waitFor(
        () => received.at(-1),
        (request) => request !== undefined && healthCount(request) >= 3,
      );
      // On a failure, what the gateway printed and what the collector received.
      const seen = () => `gateway output:\n${output()}\nreceived ${received.length}: ${received.at(-1)?.body ?? ''}`;
      expect(last && healthCount(last), seen()).toBe(3);
      if (!last) return;

      expect(last.path).toBe('/otlp/v1/metrics');
      expect(last.headers['content-type']).toBe('application/json');
      expect(last.headers.authorization).toBe(`Bearer ${SECRET}`);
      expect(last.headers['x-scope']).toBe('gateway');
      const request = JSON.parse(last.body) as ExportRequest;
      expect(request.resourceMetrics[0]?.resource.attributes).toEqual([
        { key: 'service.name', value: { stringValue: 'assistants-gateway' } },
      ]);
      const metrics = metricsOf(last);
      const counter = metrics.find((metric) => metric.name === 'gateway_http_requests_total');
      expect(counter?.sum).toMatchObject({ aggregationTemporality: 2, isMonotonic: true });
      const memory = metrics.find((metric) => metric.name === 'process_resident_memory_bytes');
      expect(memory?.gauge?.dataPoints[0]?.asDouble).toBeGreaterThan(1024 * 1024);

      // A histogram: each bucket's own count, one more bucket than bounds, adding up to the count.
      const durations = metrics.find((metric) => metric.name === 'gateway_http_request_duration_seconds');
      expect(durations?.histogram?.aggregationTemporality).toBe(2);
      const health = durations?.histogram?.dataPoints.find(
        (point) => label(point, 'route') === '/health' && label(point, 'status_class') === '2xx',
      );
      expect(health?.count, seen()).toBe('3');
      expect(health?.bucketCounts).toHaveLength((health?.explicitBounds?.length ?? 0) + 1);
      expect(health?.bucketCounts?.reduce((sum, count) => sum + Number(count), 0)).toBe(3);
      expect(health?.sum).toBeGreaterThan(0);
      expect(health?.timeUnixNano).toMatch(/^\d{19}$/);
      expect(BigInt(health?.timeUnixNano ?? 0)).toBeGreaterThan(BigInt(health?.startTimeUnixNano ?? 0));

      // Every interval, not once: exports keep coming.
      const count = received.length;
      await waitFor(
        () => received.length,
        (now) => now >= count + 2,
      );
      expect(received.length).toBeGreaterThanOrEqual(count + 2);
    } finally {
      await gateway.stop();
    }
    expect(output()).not.toContain(SECRET);
  });
});
