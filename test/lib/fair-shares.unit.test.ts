import { defined } from '../support/defined';
import { afterEach, describe, expect, it } from 'vitest';
import { FairShares, ShareTimeout, type Share, type ShareLimits } from '../../src/lib/fair-shares';

/**
 * Fair shares (src/lib/fair-shares.ts), the rules one at a time: who goes at once, who waits, in
 * what order they are let in, and what a wait that reaches its deadline says. The same shares
 * bound a run's provider calls end to end in test/resources/runs/turn-bounds.test.ts.
 */

const LIMITS: ShareLimits = { calls: 4, callsPerKey: 2, bytes: 1000, bytesPerKey: 600 };
const LONG = 60_000;

/** Ends the waits a test left in line, so that none reaches its deadline once the test is over. */
const leftInLine = new Set<AbortController>();
afterEach(() => {
  for (const controller of leftInLine) controller.abort(new Error('the test is over'));
  leftInLine.clear();
});

/** Takes in order, recording who was let in when; a wait left in line ends with its test. */
function recorder(shares: FairShares) {
  const admitted: string[] = [];
  const shareOf = new Map<string, Share>();
  const over = new AbortController();
  leftInLine.add(over);
  const take = (name: string, key: string, bytes = 0, timeoutMs = LONG, signal?: AbortSignal) => {
    const taken = shares
      .take(key, bytes, timeoutMs, signal ? AbortSignal.any([signal, over.signal]) : over.signal)
      .then((share) => {
        admitted.push(name);
        shareOf.set(name, share);
        return share;
      });
    // Those a test leaves in line end when it does: their refusal is expected, not unhandled.
    taken.catch(() => {});
    return taken;
  };
  return {
    admitted,
    take,
    end: (name: string) => defined(shareOf.get(name)).end(),
    sent: (name: string) => defined(shareOf.get(name)).sent(),
  };
}

/** Lets the promises settled so far run their callbacks. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('fair shares', () => {
  it('lets a key take its calls at once, then makes it wait, in its order', async () => {
    const shares = new FairShares(LIMITS);
    const { admitted, take, end } = recorder(shares);
    for (const name of ['a1', 'a2', 'a3', 'a4']) void take(name, 'a');
    await settle();
    expect(admitted).toEqual(['a1', 'a2']);
    expect(shares.held('a')).toEqual({ calls: 2, bytes: 0 });
    end('a2');
    await settle();
    expect(admitted).toEqual(['a1', 'a2', 'a3']);
    end('a1');
    await settle();
    expect(admitted).toEqual(['a1', 'a2', 'a3', 'a4']);
  });

  it('never makes another key wait behind a key at its own limit', async () => {
    const shares = new FairShares(LIMITS);
    const { admitted, take } = recorder(shares);
    for (const name of ['a1', 'a2', 'a3', 'a4', 'a5']) void take(name, 'a');
    void take('b1', 'b');
    void take('b2', 'b');
    await settle();
    expect(admitted).toEqual(['a1', 'a2', 'b1', 'b2']);
    expect(shares.held()).toEqual({ calls: 4, bytes: 0 });
  });

  it('at the overall limit, lets in the oldest whose key has room first', async () => {
    const shares = new FairShares(LIMITS);
    const { admitted, take, end } = recorder(shares);
    for (const [name, key] of [
      ['a1', 'a'],
      ['b1', 'b'],
      ['c1', 'c'],
      ['d1', 'd'],
      ['a2', 'a'],
      ['c2', 'c'],
      ['b2', 'b'],
    ])
      void take(defined(name), defined(key));
    await settle();
    expect(admitted).toEqual(['a1', 'b1', 'c1', 'd1']);
    end('d1');
    await settle();
    expect(admitted.at(-1)).toBe('a2');
    end('a1');
    await settle();
    expect(admitted.at(-1)).toBe('c2');
  });

  it('weighs bytes per key and in all, lets a taker heavier than a budget in alone, and gives bytes back once sent', async () => {
    const shares = new FairShares(LIMITS);
    const { admitted, take, sent, end } = recorder(shares);
    void take('a1', 'a', 400);
    void take('a2', 'a', 400);
    void take('b1', 'b', 5000);
    void take('c1', 'c', 100);
    await settle();
    // a2 would take a past 600; b1 weighs more than any budget, so it goes when nothing else is
    // held (in b, and in all); c1, behind it, does not overtake it.
    expect(admitted).toEqual(['a1']);
    sent('a1');
    await settle();
    expect(admitted).toEqual(['a1', 'a2']);
    expect(shares.held('a')).toEqual({ calls: 2, bytes: 400 });
    sent('a2');
    await settle();
    expect(admitted).toEqual(['a1', 'a2', 'b1']);
    end('b1');
    await settle();
    expect(admitted).toEqual(['a1', 'a2', 'b1', 'c1']);
    expect(shares.held()).toEqual({ calls: 3, bytes: 100 });
  });

  it.each<[string, ShareLimits, [string, number][], keyof ShareLimits]>([
    [
      'its key has all its calls',
      LIMITS,
      [
        ['a', 0],
        ['a', 0],
      ],
      'callsPerKey',
    ],
    [
      'all calls are held',
      LIMITS,
      [
        ['a', 0],
        ['b', 0],
        ['b', 0],
        ['c', 0],
      ],
      'calls',
    ],
    ["its key's bytes are held", LIMITS, [['a', 500]], 'bytesPerKey'],
    [
      'the bytes in all are held',
      LIMITS,
      [
        ['b', 500],
        ['c', 450],
      ],
      'bytes',
    ],
  ])('ends a wait at its deadline with the limit that kept it: %s', async (_, limits, held, limit) => {
    const shares = new FairShares(limits);
    for (const [key, bytes] of held) await shares.take(key, bytes, LONG);
    const error = await shares.take('a', 200, 20).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(ShareTimeout);
    expect(error).toMatchObject({ limit, value: limits[limit] });
  });

  it('ends a wait when its signal aborts, with its reason, and lets those behind it in', async () => {
    const shares = new FairShares({ ...LIMITS, callsPerKey: 1 });
    const { admitted, take, end } = recorder(shares);
    void take('a1', 'a');
    const leave = new AbortController();
    const left = take('a2', 'a', 0, LONG, leave.signal).catch((error: unknown) => error);
    void take('a3', 'a');
    await settle();
    leave.abort(new Error('cancelled'));
    expect(await left).toMatchObject({ message: 'cancelled' });
    end('a1');
    await settle();
    expect(admitted).toEqual(['a1', 'a3']);
  });

  it('says how long a share was waited for: nothing when there was room', async () => {
    const shares = new FairShares({ ...LIMITS, callsPerKey: 1 });
    const first = await shares.take('a', 0, LONG);
    expect(first.waitedMs).toBe(0);
    const second = shares.take('a', 0, LONG);
    await new Promise((resolve) => setTimeout(resolve, 30));
    first.end();
    expect((await second).waitedMs).toBeGreaterThanOrEqual(25);
  });

  it('forgets a key that holds nothing, and ending twice gives back once', async () => {
    const shares = new FairShares(LIMITS);
    const share = await shares.take('a', 300, LONG);
    share.end();
    share.end();
    expect(shares.held()).toEqual({ calls: 0, bytes: 0 });
    expect(shares.held('a')).toEqual({ calls: 0, bytes: 0 });
  });
});
