import { DurableObject } from 'cloudflare:workers';
import * as z from 'zod';
import {
  gatewayMetrics,
  unservedMetrics,
  type KeptMetrics,
  type Metrics,
  type ScrapeGauges,
} from '../../metrics/gateway';
import type { CollectedFamily, CollectedSeries } from '../../metrics/registry';
import type { Logger } from '../../logger';

/**
 * GET /metrics on Workers (docs/metrics.md, "On Workers"). Each isolate records into its own
 * registry, as Node's process does (recording stays a Map lookup and an addition), and hands what
 * it recorded since its last hand-off, a delta, to one MetricsAggregate object: at most once per
 * GATEWAY_METRICS_HANDOFF_MS, after a request or a run, in `waitUntil` (never awaited by a
 * request), and at a scrape. The object adds the deltas up, bounded as one registry is, and keeps
 * the sums in its storage; a scrape renders them with the registry's own writer.
 *
 * What can be lost: an isolate evicted before its next hand-off, at most one interval's figures
 * of its own; a hand-off that fails is merged back and goes with the next.
 */

/** What an isolate asks of the aggregate. */
export interface MetricsAggregateRpc {
  /** Adds an isolate's delta. */
  handOff(delta: CollectedFamily[]): void;
  /** Adds the scraping isolate's delta; answers every series as the sums now stand. */
  scrape(delta: CollectedFamily[]): Promise<CollectedFamily[]>;
}

/** The isolate's metrics, and what hands them to the aggregate. */
export interface IsolateMetrics extends Metrics {
  /**
   * Hands what this isolate recorded to the aggregate in `waitUntil`: now if the interval since the
   * last hand-off has passed, else at its end (a timer, set once per interval). A clock read and a
   * comparison on a request's path.
   */
  handOffSoon(waitUntil: (promise: Promise<unknown>) => void): void;
}

/** Where there is no aggregate to hand to (the previews' ingest Worker): nothing kept, nothing handed. */
export const unhandedMetrics: IsolateMetrics = { ...unservedMetrics, handOffSoon: () => {} };

/** The one aggregate of a deployment, found by this name. */
const AGGREGATE_NAME = 'gateway';

export function isolateMetrics(
  namespace: DurableObjectNamespace<MetricsAggregate>,
  options: { intervalMs: number; log: Logger },
): IsolateMetrics {
  const local = gatewayMetrics({ memory: false });
  const readings: ((gauges: ScrapeGauges) => void | Promise<void>)[] = [];
  // Made where it is used: a stub belongs to the request (or object event) that made it.
  const aggregate = () => namespace.get(namespace.idFromName(AGGREGATE_NAME));
  let handedOffAt = 0;
  /** When the timer set last (in a `waitUntil`) ends: one interval's end at a time. */
  let timerAt = 0;

  /** Sends the delta with `send`; on a failure, keeps it for the next hand-off and throws. */
  async function handOff<T>(send: (delta: CollectedFamily[]) => Promise<T>): Promise<T> {
    handedOffAt = Date.now();
    const delta = local.take();
    try {
      return await send(delta);
    } catch (error) {
      local.merge(delta);
      throw error;
    }
  }

  /** The isolate's delta handed to the aggregate, unless it is empty; a failure is logged. */
  function handOffNow(): Promise<void> {
    return handOff(async (delta) => {
      if (delta.length > 0) await aggregate().handOff(delta);
    }).catch((error: unknown) => {
      options.log.warn('metrics hand-off failed; kept for the next', { error });
    });
  }

  /** The aggregate with this isolate's delta in it, and the scrape's readings, in a registry of their own. */
  async function scraped(): Promise<KeptMetrics> {
    const sums = await handOff((delta) => aggregate().scrape(delta));
    const view = gatewayMetrics({ memory: false });
    view.merge(sums);
    for (const read of readings) view.onScrape(read);
    return view;
  }

  return {
    served: true,
    request: local.request,
    database: local.database,
    providerCall: local.providerCall,
    runEnded: local.runEnded,
    tokens: local.tokens,
    rateLimit: local.rateLimit,
    onScrape: (read) => void readings.push(read),
    render: async () => (await scraped()).render(),
    collect: async () => (await scraped()).collect(),
    handOffSoon(waitUntil) {
      const now = Date.now();
      const dueAt = handedOffAt + options.intervalMs;
      if (now >= dueAt) return waitUntil(handOffNow());
      // Set once per interval. Should the runtime drop it (its request's allowance ended), the first
      // call past the interval's end hands off instead.
      if (timerAt >= dueAt) return;
      timerAt = dueAt;
      waitUntil(
        new Promise((resolve) => setTimeout(resolve, dueAt - now)).then(() =>
          // Another call may have handed off since.
          Date.now() >= handedOffAt + options.intervalMs ? handOffNow() : undefined,
        ),
      );
    },
  };
}

/** A stored series' point, as `collect` wrote it. */
const storedPoint = z.union([
  z.object({ value: z.number() }),
  z.object({
    histogram: z.object({
      bounds: z.array(z.number()),
      counts: z.array(z.number()),
      sum: z.number(),
      count: z.number(),
    }),
  }),
]);
const storedLabels = z.record(z.string(), z.string());

/**
 * The deployment's metrics, added up from every isolate's deltas (one object, named
 * AGGREGATE_NAME). Its sums are a `gatewayMetrics` registry, so that many isolates together keep
 * to one registry's bounds (BoundedValues, `maxSeries` and `other`), and each series is kept in a
 * row of its own storage as it changes: an eviction loses nothing handed off, and a hand-off writes
 * only the series it changed.
 */
export class MetricsAggregate extends DurableObject implements MetricsAggregateRpc {
  #sums: KeptMetrics | undefined;

  handOff(delta: CollectedFamily[]): void {
    this.#add(delta);
  }

  async scrape(delta: CollectedFamily[]): Promise<CollectedFamily[]> {
    this.#add(delta);
    return (await this.#loaded().collect()) ?? [];
  }

  #add(delta: CollectedFamily[]): void {
    const sql = this.ctx.storage.sql;
    for (const family of this.#loaded().merge(delta)) {
      for (const series of family.series) {
        const { labels, ...point } = series;
        sql.exec(
          'INSERT INTO series (name, type, labels, point) VALUES (?, ?, ?, ?) ' +
            'ON CONFLICT (name, labels) DO UPDATE SET point = excluded.point',
          family.name,
          family.type,
          JSON.stringify(labels),
          JSON.stringify(point),
        );
      }
    }
  }

  /** The sums, read from storage on the object's first call. */
  #loaded(): KeptMetrics {
    if (this.#sums) return this.#sums;
    const sql = this.ctx.storage.sql;
    sql.exec(
      'CREATE TABLE IF NOT EXISTS series (name TEXT NOT NULL, type TEXT NOT NULL, labels TEXT NOT NULL, ' +
        'point TEXT NOT NULL, PRIMARY KEY (name, labels))',
    );
    const families = new Map<string, CollectedFamily>();
    for (const row of sql.exec<{ name: string; type: string; labels: string; point: string }>(
      'SELECT name, type, labels, point FROM series',
    )) {
      const type = row.type === 'counter' || row.type === 'histogram' ? row.type : null;
      const labels = storedLabels.safeParse(JSON.parse(row.labels));
      const point = storedPoint.safeParse(JSON.parse(row.point));
      if (!type || !labels.success || !point.success) continue;
      const series: CollectedSeries = { labels: labels.data, ...point.data };
      const family = families.get(row.name);
      if (family) family.series.push(series);
      else families.set(row.name, { name: row.name, help: '', type, series: [series] });
    }
    this.#sums = gatewayMetrics({ memory: false });
    this.#sums.merge([...families.values()]);
    return this.#sums;
  }
}
