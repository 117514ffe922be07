import { defined } from '../support/defined';
import { describe, expect, it } from 'vitest';
import { EventLoopSlices } from '../../src/lib/slices';

/**
 * EventLoopSlices (lib/slices.ts) on a clock of the test's own, with its turns ended by the test:
 * work that waits with `while (slices.spent())` takes one slice's worth a turn however many runs
 * wait together, and every run gets through.
 */

/** Eight runs of six pieces of 2 ms each, waiting for slices of 8 ms `how` they do: the runs that did a piece, turn by turn. */
async function eightRuns(how: 'while' | 'if'): Promise<number[][]> {
  let clock = 0;
  const ends: (() => void)[] = [];
  const slices = new EventLoopSlices({
    now: () => clock,
    ends: {
      soon: (end) => {
        ends.push(end);
        return () => {
          const at = ends.indexOf(end);
          if (at >= 0) ends.splice(at, 1);
        };
      },
      afterIo: (end) => ends.push(end),
    },
  });
  const turns: number[][] = [[]];
  const run = async (id: number) => {
    for (let piece = 0; piece < 6; piece++) {
      if (how === 'while') while (slices.spent()) await slices.next();
      else if (slices.spent()) await slices.next();
      clock += 2;
      defined(turns.at(-1)).push(id);
      await Promise.resolve();
    }
  };
  const runs = Promise.all(Array.from({ length: 8 }, (_, id) => run(id)));
  for (let turn = 0; turn < 100; turn++) {
    // Every continuation this turn runs, then the slice's end, as the event loop would.
    await new Promise((resolve) => setImmediate(resolve));
    const end = ends.shift();
    if (!end) break;
    turns.push([]);
    end();
  }
  await runs;
  return turns.filter((turn) => turn.length > 0);
}

describe('EventLoopSlices', () => {
  it("gives each turn one slice's worth of pieces, however many runs waited for it, and every run its six", async () => {
    const turns = await eightRuns('while');
    // 8 ms a slice, 2 ms a piece: four pieces, then the slice is spent.
    expect(turns.every((turn) => turn.length === 4)).toBe(true);
    expect(turns).toHaveLength(12);
    for (let id = 0; id < 8; id++) expect(turns.flat().filter((run) => run === id)).toHaveLength(6);
    // Taking turns: no run does two pieces in a turn while another waits.
    expect(turns.every((turn) => new Set(turn).size === turn.length)).toBe(true);
  });

  it('is overrun by waiters that look only once (`if`): each resumed run does a piece, spent or not', async () => {
    const turns = await eightRuns('if');
    expect(Math.max(...turns.map((turn) => turn.length))).toBeGreaterThanOrEqual(8);
  });

  it('ends a slice nothing waits on `soon`, and one that work waits on `afterIo`, its `soon` end cancelled', async () => {
    let clock = 0;
    const scheduled: string[] = [];
    const pending = new Map<string, () => void>();
    const slices = new EventLoopSlices({
      now: () => clock,
      ends: {
        soon: (end) => {
          scheduled.push('soon');
          pending.set('soon', end);
          return () => {
            scheduled.push('soon cancelled');
            pending.delete('soon');
          };
        },
        afterIo: (end) => {
          scheduled.push('afterIo');
          pending.set('afterIo', end);
        },
      },
    });
    // A turn's first look starts a slice, with an end that nothing waits on.
    expect(slices.spent()).toBe(false);
    expect(scheduled).toEqual(['soon']);
    defined(pending.get('soon'))();
    // (An end clears the timer it may have come from: a no-op for one that has fired.)
    expect(scheduled).toEqual(['soon', 'soon cancelled']);

    // A slice spent: the work waits, on an end after the I/O pending meanwhile.
    expect(slices.spent()).toBe(false);
    clock += 8;
    expect(slices.spent()).toBe(true);
    let resumed = false;
    const waited = slices.next().then(() => (resumed = true));
    expect(scheduled.slice(2)).toEqual(['soon', 'soon cancelled', 'afterIo']);
    expect([...pending.keys()]).toEqual(['afterIo']);
    await Promise.resolve();
    expect(resumed).toBe(false);
    defined(pending.get('afterIo'))();
    await waited;
    expect(resumed).toBe(true);
    // The next turn starts afresh.
    expect(slices.spent()).toBe(false);
  });
});
