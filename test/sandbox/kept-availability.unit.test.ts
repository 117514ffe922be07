import { describe, expect, it } from 'vitest';
import { defined } from '../support/defined';
import { waitFor } from '../support/wait';
import { withKeptAvailability } from '../../src/sandbox/kept-availability';
import { noSandbox } from '../../src/sandbox/configured';
import type { Availability, Sandbox } from '../../src/sandbox/sandbox';

/** A sandbox whose availability is what `answers` says next, counting the questions. */
function counted(answers: Availability[]): Sandbox & { asked: number } {
  const inner = noSandbox('unused');
  const sandbox = {
    asked: 0,
    availability: () => Promise.resolve(defined(answers[Math.min(sandbox.asked++, answers.length - 1)])),
    open: inner.open,
    close: inner.close,
  };
  return sandbox;
}

describe('withKeptAvailability', () => {
  it('asks an available sandbox again after 30 s, an unavailable one after 5 s, giving the last answer meanwhile', async () => {
    let now = 0;
    const inner = counted([{ available: false, reason: 'down' }, { available: true }]);
    const kept = withKeptAvailability(inner, () => now);
    expect(await kept.availability()).toEqual({ available: false, reason: 'down' });
    now = 4_999;
    expect(await kept.availability()).toEqual({ available: false, reason: 'down' });
    expect(inner.asked).toBe(1);
    // Old: asked again, the last answer given until the new one is in.
    now = 5_000;
    expect(await kept.availability()).toEqual({ available: false, reason: 'down' });
    expect(inner.asked).toBe(2);
    // The new answer, once it is in (asked no more meanwhile).
    expect(
      await waitFor(
        () => kept.availability(),
        (found) => found.available,
      ),
    ).toEqual({ available: true });
    expect(inner.asked).toBe(2);
    now = 34_999;
    expect(await kept.availability()).toEqual({ available: true });
    expect(inner.asked).toBe(2);
    now = 35_000;
    await kept.availability();
    expect(inner.asked).toBe(3);
  });

  it('never waits on a check once an answer is known: a sandbox server that stops answering holds nothing up', async () => {
    let now = 0;
    let hang = false;
    const inner = noSandbox('unused');
    let asked = 0;
    const kept = withKeptAvailability(
      {
        availability: () => {
          asked++;
          return hang ? new Promise<never>(() => undefined) : Promise.resolve({ available: true });
        },
        open: inner.open,
        close: inner.close,
      },
      () => now,
    );
    expect(await kept.availability()).toEqual({ available: true });
    hang = true;
    now = 60_000;
    const settled = Symbol('pending');
    // Each answer is settled at once (Promise.race takes the first settled), and one check at a time is asked.
    for (let i = 0; i < 3; i++) {
      expect(await Promise.race([kept.availability(), Promise.resolve(settled)])).toEqual({ available: true });
    }
    expect(asked).toBe(2);
    // A check that never answers is given up after 15 s, and another asked for.
    now = 74_999;
    await kept.availability();
    expect(asked).toBe(2);
    now = 75_000;
    expect(await kept.availability()).toEqual({ available: true });
    expect(asked).toBe(3);
  });

  it('never makes a first question wait on another’s check: on Workers, a check of an ended request may never settle', async () => {
    const inner = noSandbox('unused');
    let asked = 0;
    const kept = withKeptAvailability({
      // The first check never settles; the next answers.
      availability: () => (asked++ === 0 ? new Promise<never>(() => undefined) : Promise.resolve({ available: true })),
      open: inner.open,
      close: inner.close,
    });
    void kept.availability();
    expect(await kept.availability()).toEqual({ available: true });
    expect(asked).toBe(2);
  });
});
