import { appendFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The figures behind `npm run test:reliability`'s closing table. Suites that inject faults or try
 * bad inputs add what they did here; the runner (scripts/reliability.ts) sums every suite's lines
 * and prints the table. Outside that run (RELIABILITY_REPORT_DIR unset) nothing is written, so the
 * same tests run in `npm test` unchanged.
 */
export interface Tally {
  /** Generated or hand-written bad requests sent. */
  inputsTried?: number;
  /** Upstream faults, crashes and disconnects caused on purpose. */
  faultsInjected?: number;
  /** Runs the gateway acknowledged (answered with an id). */
  runsCreated?: number;
  /** Acknowledged runs missing afterwards, or never reaching a terminal status. Must be 0. */
  runsLost?: number;
  /** Rows left by a refused or failed request, or half of a write. Must be 0. */
  rowsHalfWritten?: number;
  /** Requests answered with a 5xx. Must be 0. */
  answered5xx?: number;
  /** Runs against an upstream that behaved as an attacker's would (test/reliability/hostile.test.ts). */
  hostileUpstreams?: number;
  /** Health checks answered in more than 50 ms while hostile upstreams were at work. Must be 0. */
  gatewayStalls?: number;
  /** Gateway processes that died of running out of memory. Must be 0. */
  outOfMemoryDeaths?: number;
  /**
   * Concurrency guarantees broken while a CPU hog kept every core busy (test/reliability/starvation.test.ts):
   * a second run admitted or active on a thread, a racer admitted past a held token reservation, a
   * reservation not given back or a counter not exact, a run failed that should have completed, a
   * racer's row or open exchange left behind. Must be 0.
   */
  starvationViolations?: number;
}

export function recordTally(suite: string, tally: Tally): void {
  const dir = process.env.RELIABILITY_REPORT_DIR;
  if (!dir) return;
  appendFileSync(join(dir, 'tally.jsonl'), `${JSON.stringify({ suite, ...tally })}\n`);
}
