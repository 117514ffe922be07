import type { Client, Row } from '@libsql/client';
import type { Logger } from '../logger';
import {
  hasRoom,
  type AdmitResult,
  type CounterAdjustment,
  type CounterAdmission,
  type CounterStore,
  type PolicyCounters,
  type Refusal,
} from './counter-store';
import { StoredRefusals, type StoredRefusalsOptions } from './stored-refusals';

/**
 * Counters in the rate_limit_counters table, through the libSQL client itself (these statements
 * run on every admission; the query builder would add a few dozen microseconds to each).
 *
 * An admission is one statement, and SQLite runs a statement as one write transaction: it
 * inserts (or adds to) every counter only if none of them lacks room. Writers to one database
 * file, or one libSQL server, take turns, so the check and the increment can never interleave
 * with another admission, in this process or any other. The counters are passed as one JSON
 * array, so the statement's text never changes and no count of counters can exceed SQLite's
 * limit on bound parameters. On Node's embedded file the store writes through the file's immediate
 * client, whose commits do not wait for the disk (NodeDatabase.countersClient says why that is safe).
 */

// MATERIALIZED: `request` is read twice, and the JSON is parsed once.
const ADMIT = `
WITH request AS MATERIALIZED (
  SELECT value ->> 0 AS key, value ->> 1 AS cost, value ->> 2 AS lim, value ->> 3 AS window_end, value ->> 4 AS must_fit
  FROM json_each(?1)
)
INSERT INTO rate_limit_counters (key, used, window_end)
SELECT key, cost, window_end FROM request
WHERE NOT EXISTS (
  -- a counter without room: hasRoom() in counter-store.ts, with a missing counter at 0
  SELECT 1 FROM request LEFT JOIN rate_limit_counters AS counter ON counter.key = request.key
  WHERE NOT (coalesce(counter.used, 0) < request.lim
    AND (NOT request.must_fit OR coalesce(counter.used, 0) + request.cost <= request.lim))
)
ON CONFLICT (key) DO UPDATE SET used = used + excluded.used
RETURNING key, used`;

const READ = `SELECT key, used FROM rate_limit_counters WHERE key IN (SELECT value FROM json_each(?1))`;

// Adjustments: [key, delta, window end]. Additions create missing counters; releases only lower
// existing ones; neither goes below 0. (`WHERE` before ON CONFLICT also tells SQLite's parser that
// it starts the upsert, not a join constraint.)
const ADD = `
INSERT INTO rate_limit_counters (key, used, window_end)
SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?1) WHERE value ->> 1 > 0
ON CONFLICT (key) DO UPDATE SET used = max(0, used + excluded.used)`;
const RELEASE = `
UPDATE rate_limit_counters
SET used = max(0, used + (SELECT value ->> 1 FROM json_each(?1) WHERE value ->> 0 = rate_limit_counters.key))
WHERE key IN (SELECT value ->> 0 FROM json_each(?1) WHERE value ->> 1 < 0)`;

// One window of one policy: the keys from its prefix up to the prefix's successor (keyRange).
// total: every group of the window, counted before the limit.
const GROUPS = `
SELECT key, used, count(*) OVER () AS total FROM rate_limit_counters
WHERE key >= ?1 AND key < ?2
ORDER BY used DESC, key
LIMIT ?3`;

const PRUNE = `
DELETE FROM rate_limit_counters
WHERE key IN (SELECT key FROM rate_limit_counters WHERE window_end <= ?1 LIMIT ?2)`;

export interface LibsqlCounterStoreOptions {
  log: Logger;
  /** How often admissions prune expired counters (ms). */
  pruneIntervalMs?: number;
  /** At most this many rows go per prune, so that no prune holds the write lock for long. */
  pruneBatch?: number;
  /** How refusals are written to their table (stored-refusals.ts): how often at most, on which timer. */
  refusals?: Omit<StoredRefusalsOptions, 'log'>;
}

export class LibsqlCounterStore implements CounterStore {
  readonly #client: Client;
  readonly #log: Logger;
  readonly #pruneIntervalMs: number;
  readonly #pruneBatch: number;
  #nextPruneAt = -Infinity;
  /** Refusals, in their table, written from a buffer about once a second (stored-refusals.ts). */
  readonly #refusals: StoredRefusals;

  constructor(client: Client, options: LibsqlCounterStoreOptions) {
    this.#client = client;
    this.#log = options.log;
    this.#pruneIntervalMs = options.pruneIntervalMs ?? 60_000;
    this.#pruneBatch = options.pruneBatch ?? 1000;
    this.#refusals = new StoredRefusals(client, { log: options.log, ...options.refusals });
  }

  async admit(_scope: string, counters: CounterAdmission[], now: number): Promise<AdmitResult> {
    if (now >= this.#nextPruneAt) await this.#prunePeriodically(now);
    // Tokens policies cost nothing at admission: a read decides, and nothing is written.
    if (counters.some((counter) => counter.cost > 0)) {
      const args = [JSON.stringify(counters.map((c) => [c.key, c.cost, c.limit, c.windowEnd, c.mustFit]))];
      const { rows } = await this.#client.execute({ sql: ADMIT, args });
      if (rows.length > 0) return { admitted: true, used: usageOf(rows, counters) };
    }
    const used = await this.read(counters.map((counter) => counter.key));
    const admitted = counters.every((c) => hasRoom(used.get(c.key) ?? 0, c.cost, c.limit, c.mustFit));
    return { admitted, used };
  }

  /** Both kinds of change in one transaction, so that no admission sees a release without its charge. */
  async adjust(_scope: string, adjustments: CounterAdjustment[]): Promise<void> {
    const changes = adjustments.filter((a) => a.delta !== 0 && Number.isFinite(a.delta));
    if (changes.length === 0) return;
    const args = [JSON.stringify(changes.map((a) => [a.key, a.delta, a.windowEnd]))];
    const statements = [
      ...(changes.some((a) => a.delta < 0) ? [{ sql: RELEASE, args }] : []),
      ...(changes.some((a) => a.delta > 0) ? [{ sql: ADD, args }] : []),
    ];
    const [only, ...others] = statements;
    if (only && others.length === 0) await this.#client.execute(only);
    else await this.#client.batch(statements, 'write');
  }

  /** Usage by key; 0 for a counter that does not exist. */
  async read(keys: string[]): Promise<Map<string, number>> {
    const { rows } = await this.#client.execute({ sql: READ, args: [JSON.stringify(keys)] });
    const stored = new Map(rows.map((row) => [row.key as string, Number(row.used)]));
    return new Map(keys.map((key) => [key, stored.get(key) ?? 0]));
  }

  noteRefusal(_scope: string, policyId: string, refusal: Refusal): Promise<void> {
    this.#refusals.note(policyId, refusal);
    return Promise.resolve();
  }

  async policyCounters(_scope: string, policyId: string, prefix: string, limit: number): Promise<PolicyCounters> {
    const { rows } = await this.#client.execute({ sql: GROUPS, args: [prefix, afterPrefix(prefix), limit] });
    return {
      groups: rows.map((row) => ({ group: String(row.key).slice(prefix.length), used: Number(row.used) })),
      totalGroups: Number(rows[0]?.total ?? 0),
      refusals: await this.#refusals.of(policyId),
    };
  }

  /** Writes the refusals not written yet. */
  flush(): Promise<void> {
    return this.#refusals.flush();
  }

  /** Deletes up to one batch of counters whose window ended by `now`; resolves to how many. */
  async prune(now: number): Promise<number> {
    const result = await this.#client.execute({ sql: PRUNE, args: [now, this.#pruneBatch] });
    return result.rowsAffected;
  }

  /**
   * Pruning is housekeeping: it never fails an admission. A full batch means more may be waiting,
   * so the next admission prunes again; otherwise the next prune is an interval away.
   */
  async #prunePeriodically(now: number) {
    this.#nextPruneAt = now + this.#pruneIntervalMs;
    try {
      if ((await this.prune(now)) >= this.#pruneBatch) this.#nextPruneAt = now;
    } catch (error) {
      this.#log.warn('rate-limit counter pruning failed', { error });
    }
  }
}

function usageOf(rows: Row[], counters: CounterAdmission[]) {
  const used = new Map(rows.map((row) => [row.key as string, Number(row.used)]));
  for (const counter of counters) if (!used.has(counter.key)) used.set(counter.key, 0);
  return used;
}

/** The first text after every text that begins with `prefix` (not empty): its last character's successor. */
function afterPrefix(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}
