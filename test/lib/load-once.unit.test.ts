import { describe, expect, it } from 'vitest';
import { loadOnce } from '../../src/lib/load-once';

/** lib/load-once.ts: what a lazy route group (http/lazy-group.ts) and a lazy dep load with. */
describe('loadOnce', () => {
  it('loads once for concurrent first calls and keeps what it loaded', async () => {
    let loads = 0;
    const finishes: ((value: string) => void)[] = [];
    const loaded = loadOnce(() => {
      loads += 1;
      return new Promise<string>((resolve) => finishes.push(resolve));
    });
    const first = [loaded(), loaded(), loaded()];
    for (const finish of finishes) finish('module');
    expect(loads).toBe(1);
    expect(await Promise.all(first)).toEqual(['module', 'module', 'module']);
    expect(await loaded()).toBe('module');
    expect(loads).toBe(1);
  });

  it('forgets a failed load, so that the next call tries again', async () => {
    let loads = 0;
    const loaded = loadOnce(async () => {
      loads += 1;
      if (loads === 1) throw new Error('the chunk is missing');
      return 'module';
    });
    await expect(Promise.all([loaded(), loaded()])).rejects.toThrow('the chunk is missing');
    expect(loads).toBe(1);
    expect(await loaded()).toBe('module');
    expect(await loaded()).toBe('module');
    expect(loads).toBe(2);
  });
});
