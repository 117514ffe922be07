import { defined } from '../../support/defined';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { afterAll, describe, expect, it } from 'vitest';
import { trimMemoryWhenIdle, type TrimReport } from '../../../src/runtime/node/memory-trim';
import { memoryOf, startGatewayProcess } from '../../support/processes';

/**
 * After its start-up and after a burst, the Node gateway gives back the memory it grew
 * (src/runtime/node/memory-trim.ts): once idle, never while requests arrive or background work runs,
 * and once per growth of the heap.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('trimMemoryWhenIdle', () => {
  /**
   * A trimmer looking every 20 ms, that collects after 5 quiet looks (100 ms) and again 20 looks
   * later; by default whatever the heap's size.
   */
  const watch = (
    state: { requests: number; busy: boolean },
    growthBytes = Number.NEGATIVE_INFINITY,
    firstBaselineBytes?: number,
  ) => {
    const reports: TrimReport[] = [];
    const stop = trimMemoryWhenIdle({
      firstBaselineBytes,
      activity: () => state.requests,
      busy: () => state.busy,
      trimmed: (report) => reports.push(report),
      checkMs: 20,
      idleMs: 100,
      settleMs: 400,
      growthBytes,
    });
    return { reports, stop };
  };

  it('collects twice once idle, and not while requests arrive or background work runs', async () => {
    const state = { requests: 0, busy: false };
    const { reports, stop } = watch(state);
    try {
      for (let i = 0; i < 15; i++) {
        state.requests++;
        await sleep(20);
      }
      state.busy = true;
      await sleep(300);
      expect(reports).toEqual([]);
      state.busy = false;
      await expect.poll(() => reports.length, { timeout: 2_000, interval: 10 }).toBe(1);
      expect(defined(reports[0]).collections).toBe(2);
      expect(defined(reports[0]).heapBytesBefore).toBeGreaterThan(0);
      expect(defined(reports[0]).heapBytesAfter).toBeGreaterThan(0);
    } finally {
      stop();
    }
  });

  it('stops a trim when a request arrives between its collections', async () => {
    const state = { requests: 0, busy: false };
    const { reports, stop } = watch(state);
    try {
      // Between the first collection (the 5th quiet look) and the second (the 25th).
      await sleep(250);
      state.requests++;
      await expect.poll(() => reports.length, { timeout: 2_000, interval: 5 }).toBeGreaterThan(0);
      expect(defined(reports[0]).collections).toBe(1);
    } finally {
      stop();
    }
  });

  it('holds a trim back while background work runs, and makes its second collection once it is over', async () => {
    const state = { requests: 0, busy: false };
    const { reports, stop } = watch(state);
    try {
      // Between the first collection (the 5th quiet look) and the second (the 25th): a periodic
      // sweep, which is no request.
      await sleep(250);
      state.busy = true;
      await sleep(300);
      expect(reports).toEqual([]);
      state.busy = false;
      await expect.poll(() => reports.length, { timeout: 2_000, interval: 5 }).toBe(1);
      expect(defined(reports[0]).collections).toBe(2);
    } finally {
      stop();
    }
  });

  it('counts growth from the last whole trim, not from one a request cut', async () => {
    // More than the heap could grow by in the time looked at, less than it holds.
    const growthBytes = getHeapStatistics().total_heap_size / 2;
    const state = { requests: 0, busy: false };
    const { reports, stop } = watch(state, growthBytes, 0);
    try {
      // The first trim (from a baseline of 0, as at start-up), cut between its collections.
      await sleep(250);
      state.requests++;
      await expect.poll(() => reports.length, { timeout: 2_000, interval: 5 }).toBe(1);
      expect(defined(reports[0]).collections).toBe(1);
      // The next quiet trims again, although the heap has not grown since the cut one.
      await expect.poll(() => reports.length, { timeout: 3_000, interval: 10 }).toBe(2);
      expect(defined(reports[1]).collections).toBe(2);
    } finally {
      stop();
    }
  });

  it('trims only once the heap has grown by the given amount since the last trim', async () => {
    const state = { requests: 0, busy: false };
    const { reports, stop } = watch(state, 64 * 1024 * 1024);
    try {
      await sleep(200);
      expect(reports).toEqual([]);
      // A burst's worth of objects that outlive a few scavenges, then are dropped.
      let held: number[][] | null = Array.from({ length: 800 }, () =>
        Array.from({ length: 12_000 }, (_, i) => i + 0.5),
      );
      expect(held.length).toBe(800);
      expect(getHeapStatistics().total_heap_size).toBeGreaterThan(64 * 1024 * 1024);
      held = null;
      await expect.poll(() => reports.length, { timeout: 3_000, interval: 10 }).toBe(1);
      expect(defined(reports[0]).heapBytesAfter).toBeLessThan(defined(reports[0]).heapBytesBefore);
    } finally {
      stop();
    }
  });

  it('counts what the heap held before the watch as growth, from a first baseline of 0 (a start-up)', async () => {
    // More than the heap could grow by in the 200 ms looked at, less than it holds.
    const growthBytes = getHeapStatistics().total_heap_size / 2;
    const state = { requests: 0, busy: false };
    const fromNow = watch(state, growthBytes);
    const fromStart = watch(state, growthBytes, 0);
    try {
      await expect.poll(() => fromStart.reports.length, { timeout: 2_000, interval: 10 }).toBe(1);
      await sleep(200);
      expect(fromNow.reports).toEqual([]);
    } finally {
      fromNow.stop();
      fromStart.stop();
    }
  });
});

describe('the Node gateway', () => {
  it('gives back what its start-up and then a burst grew once it is idle, and says so at debug level', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'gateway-trim-'));
    dirs.push(dataDir);
    const gateway = await startGatewayProcess({ DATA_DIR: dataDir, LOG_LEVEL: 'debug' });
    try {
      const trims = () =>
        gateway
          .stdout()
          .split('\n')
          .filter((line) => line.includes('memory given back after a burst'))
          .map((line) => JSON.parse(line) as { heap_mb_before: number; heap_mb_after: number });
      await expect.poll(() => /workspace API key\s+gk_/.test(gateway.stdout()), { timeout: 5_000 }).toBe(true);
      const key = defined(defined(/workspace API key\s+(gk_[A-Za-z0-9_-]+)/.exec(gateway.stdout()))[1]);

      // Start-up, with no request: 2 s of quiet, the first collection, 6 s more, the second. What
      // it gives back is mostly the young generation start-up grew (8 MB with npm start's flags).
      await expect.poll(() => trims().length, { timeout: 15_000, interval: 200 }).toBe(1);
      const afterStart = defined(trims()[0]);
      expect(afterStart.heap_mb_after).toBeLessThan(afterStart.heap_mb_before - 4);

      const body = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(250_000) }] });
      const burst = async () => {
        for (let i = 0; i < 40; i++) {
          const response = await fetch(`${gateway.url}/v1/threads`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${key}`,
              'content-type': 'application/json',
              'openai-beta': 'assistants=v2',
            },
            body,
          });
          expect(response.status).toBe(200);
          await response.arrayBuffer();
        }
      };
      await Promise.all([burst(), burst(), burst(), burst()]);
      expect(trims().length).toBe(1);
      const afterBurst = memoryOf(defined(gateway.child.pid)).rssMb;

      await expect.poll(() => trims().length, { timeout: 15_000, interval: 200 }).toBe(2);
      const report = defined(trims()[1]);
      expect(report.heap_mb_after).toBeLessThan(report.heap_mb_before - 8);
      expect(memoryOf(defined(gateway.child.pid)).rssMb).toBeLessThan(afterBurst - 8);
    } finally {
      await gateway.stop('SIGKILL');
    }
  }, 60_000);
});
