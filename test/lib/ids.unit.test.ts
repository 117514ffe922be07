import { describe, expect, it } from 'vitest';
import { newId } from '../../src/lib/ids';

/**
 * Ids (src/lib/ids.ts): the time they were made, then characters drawn from a pool of random
 * bytes; across many refills of the pool, each is well formed and new, and they sort by creation.
 */
describe('newId', () => {
  it('draws OpenAI-style ids, all distinct across refills of the pool, using the whole alphabet', () => {
    const ids = Array.from({ length: 10_000 }, (_, i) => newId(i % 2 === 0 ? 'run' : 'file'));
    for (const [i, id] of ids.entries())
      expect(id).toMatch(i % 2 === 0 ? /^run_[A-Za-z0-9]{24}$/ : /^file-[A-Za-z0-9]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
    const characters = new Set(ids.flatMap((id) => [...id.slice(-17)]));
    expect(characters.size).toBe(62);
    // No character is drawn far more than its share (uniform: 170,000 / 62 ≈ 2,742 each).
    const counts = new Map<string, number>();
    for (const id of ids) for (const c of id.slice(-17)) counts.set(c, (counts.get(c) ?? 0) + 1);
    for (const count of counts.values()) expect(Math.abs(count - 170_000 / 62)).toBeLessThan(400);
  });

  it('begins with the time it was made, so that ids sort by creation', async () => {
    const before = Date.now();
    const first = newId('msg');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = newId('msg');
    const after = Date.now();
    expect(first < second).toBe(true);
    // The first 7 characters are the milliseconds since 1970 in base 62 (0-9, A-Z, a-z).
    const DIGITS = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
    const timeOf = (id: string) => [...id.slice(4, 11)].reduce((ms, c) => ms * 62 + DIGITS.indexOf(c), 0);
    expect(timeOf(first)).toBeGreaterThanOrEqual(before);
    expect(timeOf(second)).toBeGreaterThan(timeOf(first));
    expect(timeOf(second)).toBeLessThanOrEqual(after);
    // Ids of one millisecond share it, and still differ.
    const burst = Array.from({ length: 100 }, () => newId('msg'));
    expect(new Set(burst).size).toBe(100);
  });
});
