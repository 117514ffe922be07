import { describe, expect, it } from 'vitest';
import { newId } from '../src/lib/ids';

/** Ids drawn from a pool of random bytes (src/lib/ids.ts): across many refills of the pool, each is well formed and new. */
describe('newId', () => {
  it('draws OpenAI-style ids, all distinct across refills of the pool, using the whole alphabet', () => {
    const ids = Array.from({ length: 10_000 }, (_, i) => newId(i % 2 === 0 ? 'run' : 'file'));
    for (const [i, id] of ids.entries()) expect(id).toMatch(i % 2 === 0 ? /^run_[A-Za-z0-9]{24}$/ : /^file-[A-Za-z0-9]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
    const characters = new Set(ids.flatMap((id) => [...id.slice(-24)]));
    expect(characters.size).toBe(62);
    // No character is drawn far more than its share (uniform: 240,000 / 62 ≈ 3,871 each).
    const counts = new Map<string, number>();
    for (const id of ids) for (const c of id.slice(-24)) counts.set(c, (counts.get(c) ?? 0) + 1);
    for (const count of counts.values()) expect(Math.abs(count - 240_000 / 62)).toBeLessThan(500);
  });
});
