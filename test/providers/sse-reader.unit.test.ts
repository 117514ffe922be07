import { describe, expect, it } from 'vitest';
import { readServerSentData } from '../../src/providers/sse-reader';
import { slicesOfOnePiece } from '../support/slices';

/**
 * The event-stream reader within the event loop's slices (lib/slices.ts): a chunk of thousands of
 * tiny events is framed a part at a time, the slice looked at between parts, and every event
 * still comes out, in order, whatever the cuts.
 */

/** A body of one chunk: what one read of a socket can hand over. */
async function* oneChunk(text: string): AsyncIterable<Uint8Array> {
  yield new TextEncoder().encode(text);
}

describe('readServerSentData within slices', () => {
  it('frames a 64 KiB chunk of tiny events part by part, waiting for the next slice before each part and before each read', async () => {
    const count = 3000;
    const body = Array.from({ length: count }, (_, i) => `data: {"i":${i}}\n\n`).join('');
    expect(body.length).toBeGreaterThan(32 * 1024);
    // Slices that hold one piece of work each, the first spent already: the reader waits before
    // asking for the chunk (asking copies what the socket holds), before every part of it, the
    // first included, and before asking for what follows (here, the body's end).
    const log: string[] = [];
    const onePartEach = slicesOfOnePiece(log, { firstSpent: true });
    const batches: string[][] = [];
    const read = readServerSentData(
      oneChunk(body),
      { maxLineBytes: 65_536, maxEventChars: 65_536 },
      () => log.push('activity'),
      undefined,
      onePartEach,
    );
    for await (const batch of read) batches.push(batch);
    expect(batches.flat()).toEqual(Array.from({ length: count }, (_, i) => `{"i":${i}}`));
    expect(batches.length).toBeGreaterThan(1);
    expect(log.filter((entry) => entry === 'wait')).toHaveLength(1 + Math.ceil(body.length / (16 * 1024)) + 1);
    expect(log[0]).toBe('wait');
  });

  it('reads the same events unsliced', async () => {
    const body = 'data: a\n\ndata: b\ndata: c\n\n: comment\n\ndata: d';
    const batches: string[][] = [];
    for await (const batch of readServerSentData(oneChunk(body), { maxLineBytes: 1024, maxEventChars: 1024 }))
      batches.push(batch);
    expect(batches.flat()).toEqual(['a', 'b\nc', 'd']);
  });
});

describe('readServerSentData, a line arriving over many reads', () => {
  /** `text` as a body cut every `size` bytes: through characters, and with no line ending in most reads. */
  async function* cutEvery(text: string, size: number): AsyncIterable<Uint8Array> {
    const bytes = new TextEncoder().encode(text);
    for (let at = 0; at < bytes.length; at += size) yield bytes.slice(at, at + size);
  }
  const read = async (body: AsyncIterable<Uint8Array>, onActivity?: () => void) => {
    const events: string[] = [];
    for await (const batch of readServerSentData(body, { maxLineBytes: 1 << 20, maxEventChars: 1 << 20 }, onActivity))
      events.push(...batch);
    return events;
  };

  it('reads it whole, its characters cut anywhere between reads', async () => {
    const long = 'é😀x\u2028'.repeat(5000);
    const body = `data: ${long}\n\ndata: second\r\n\r\ndata: third`;
    for (const size of [1, 7, 4096]) {
      expect(await read(cutEvery(body, size))).toEqual([long, 'second', 'third']);
    }
  });

  it('counts each read that carries more of a data line as activity before the line ends', async () => {
    let activity = 0;
    const events = await read(cutEvery(`data: ${'y'.repeat(10_000)}\n\n`, 1000), () => activity++);
    expect(events).toEqual(['y'.repeat(10_000)]);
    // Eleven reads: ten carry the line still open, the last ends it and the event.
    expect(activity).toBeGreaterThanOrEqual(10);
  });

  it('still refuses a line past maxLineBytes before it ends', async () => {
    const body = cutEvery(`data: ${'x'.repeat(5000)}`, 512);
    const reading = (async () => {
      for await (const batch of readServerSentData(body, { maxLineBytes: 4096, maxEventChars: 1 << 20 })) void batch;
    })();
    await expect(reading).rejects.toThrow('longer than 4096 bytes');
  });
});
