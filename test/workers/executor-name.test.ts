import { describe, expect, it } from 'vitest';
import { newId } from '../../src/lib/ids';
import { executorName } from '../../src/runtime/workers/run-host';

/**
 * Which RunExecutor object a run executes in (runtime/workers/run-host.ts): one of the pool,
 * always the same for the same run (a cancel and tool outputs must reach it), the runs spread over
 * the whole pool; with no pool, the run's own.
 */
describe('executorName', () => {
  it('names one of the pool, the same for every request about a run, the runs spread over all of it', () => {
    const ids = Array.from({ length: 3200 }, () => newId('run'));
    const counts = new Map<string, number>();
    for (const id of ids) {
      const name = executorName(id, 32);
      expect(executorName(id, 32)).toBe(name);
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    expect([...counts.keys()].sort()).toEqual(Array.from({ length: 32 }, (_, i) => `executor-${i}`).sort());
    // 100 a name on average: none holds more than twice its share.
    expect(Math.max(...counts.values())).toBeLessThan(200);
  });

  it('names the run itself without a pool (GATEWAY_RUN_EXECUTORS=0)', () => {
    const id = newId('run');
    expect(executorName(id, 0)).toBe(id);
  });
});
