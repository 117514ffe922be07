import type { Client, Row } from '@libsql/client';
import type { Logger } from '../logger';
import { MAX_REFUSALS, type Refusal } from './counter-store';
import { RecentRefusals } from './recent-refusals';

/**
 * The libSQL store's refusals, in the rate_limit_refusals table: the last MAX_REFUSALS of each
 * policy, shared by every process on the database and kept across restarts.
 *
 * A refused request is never made to wait for its refusal's write, and a flood of refused requests
 * never becomes a flood of writes: a refusal goes into a bounded buffer (recent-refusals.ts: the
 * last 20 of the 1,000 policies refused most recently), which a timer writes at most once every
 * `intervalMs` per process, in one transaction of two statements (the rows, then each policy's
 * beyond its last 20 deleted). What a crash takes is the buffer: the last interval's refusals, which
 * are diagnostics, not acknowledged data. A clean stop writes it (flush).
 */

const INSERT = `
INSERT INTO rate_limit_refusals (policy_id, at, "group", api_key_id, virtual_key, requested, used, "limit")
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7
FROM json_each(?1)`;

// Each policy written to keeps its last MAX_REFUSALS rows (by seq: the order they were written in).
const PRUNE = `
DELETE FROM rate_limit_refusals WHERE seq IN (
  SELECT seq FROM (
    SELECT seq, row_number() OVER (PARTITION BY policy_id ORDER BY seq DESC) AS n
    FROM rate_limit_refusals WHERE policy_id IN (SELECT value FROM json_each(?1))
  ) WHERE n > ${MAX_REFUSALS}
)`;

const READ = `
SELECT at, "group", api_key_id, virtual_key, requested, used, "limit" FROM rate_limit_refusals
WHERE policy_id = ?1 ORDER BY seq DESC LIMIT ${MAX_REFUSALS}`;

export interface StoredRefusalsOptions {
  log: Logger;
  /** The least time between two writes of one process (ms). */
  intervalMs?: number;
  /** Runs `task` after `ms` (setTimeout by default; Node's deps give one that does not keep the process alive). */
  schedule?: (task: () => void, ms: number) => void;
  /** The clock the interval is measured by. */
  now?: () => number;
}

export class StoredRefusals {
  readonly #client: Client;
  readonly #log: Logger;
  readonly #intervalMs: number;
  readonly #schedule: (task: () => void, ms: number) => void;
  readonly #now: () => number;
  /** Refusals not written yet. */
  #pending = new RecentRefusals();
  #scheduled = false;
  #lastWriteAt = -Infinity;
  /** The write under way, which a read waits for: its refusals are in neither the buffer nor the table meanwhile. */
  #writing: Promise<void> = Promise.resolve();

  constructor(client: Client, options: StoredRefusalsOptions) {
    this.#client = client;
    this.#log = options.log;
    this.#intervalMs = options.intervalMs ?? 1000;
    this.#schedule = options.schedule ?? ((task, ms) => void setTimeout(task, ms));
    this.#now = options.now ?? Date.now;
  }

  /** Keeps `refusal` in the buffer, and sees that a write follows within the interval. Never waits. */
  note(policyId: string, refusal: Refusal): void {
    this.#pending.note(policyId, refusal);
    if (this.#scheduled) return;
    this.#scheduled = true;
    this.#schedule(
      () => {
        this.#scheduled = false;
        void this.flush();
      },
      Math.max(0, this.#lastWriteAt + this.#intervalMs - this.#now()),
    );
  }

  /** Writes the buffer now (a clean stop; tests). Never throws: a failed write is logged, its refusals dropped. */
  flush(): Promise<void> {
    this.#writing = this.#writing.then(() => this.#write());
    return this.#writing;
  }

  /** `policyId`'s last MAX_REFUSALS refusals, newest first: every process's written ones and this one's not yet written. */
  async of(policyId: string): Promise<Refusal[]> {
    await this.#writing;
    const { rows } = await this.#client.execute({ sql: READ, args: [policyId] });
    return [...this.#pending.of(policyId), ...rows.map(refusalOf)].sort((a, b) => b.at - a.at).slice(0, MAX_REFUSALS);
  }

  async #write(): Promise<void> {
    if (this.#pending.size === 0) return;
    const taken = this.#pending;
    this.#pending = new RecentRefusals();
    this.#lastWriteAt = this.#now();
    const rows: unknown[][] = [];
    const policies: string[] = [];
    for (const [policyId, refusals] of taken.entries()) {
      policies.push(policyId);
      // Oldest first, so that seq follows time within the policy.
      for (const r of [...refusals].reverse())
        rows.push([policyId, r.at, r.group, r.apiKeyId, r.virtualKey, r.requested, r.used, r.limit]);
    }
    try {
      await this.#client.batch(
        [
          { sql: INSERT, args: [JSON.stringify(rows)] },
          { sql: PRUNE, args: [JSON.stringify(policies)] },
        ],
        'write',
      );
    } catch (error) {
      this.#log.warn('rate-limit refusals could not be written', { count: rows.length, error });
    }
  }
}

function refusalOf(row: Row): Refusal {
  return {
    at: Number(row.at),
    group: String(row.group),
    apiKeyId: String(row.api_key_id),
    virtualKey: String(row.virtual_key),
    requested: Number(row.requested),
    used: Number(row.used),
    limit: Number(row.limit),
  };
}
