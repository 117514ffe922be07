import { describe, expect, it } from 'vitest';
import { defined } from '../support/defined';
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
  it('asks an available sandbox again after 30 s, an unavailable one after 5 s', async () => {
    let now = 0;
    const inner = counted([{ available: false, reason: 'down' }, { available: true }]);
    const kept = withKeptAvailability(inner, () => now);
    expect(await kept.availability()).toEqual({ available: false, reason: 'down' });
    now = 4_999;
    expect(await kept.availability()).toEqual({ available: false, reason: 'down' });
    expect(inner.asked).toBe(1);
    now = 5_000;
    expect(await kept.availability()).toEqual({ available: true });
    now = 34_999;
    expect(await kept.availability()).toEqual({ available: true });
    expect(inner.asked).toBe(2);
    now = 35_000;
    await kept.availability();
    expect(inner.asked).toBe(3);
  });
});
