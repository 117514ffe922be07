import { describe, expect, it } from 'vitest';
import { defined } from '../support/defined';
import { answerOf, MIN_READ_BYTES, READ_BYTES } from '../../src/runtime/workers/upstream-fetch';

/**
 * How the Worker reads a provider's answer (runtime/workers/upstream-fetch.ts): into one buffer
 * it hands back to every read, at least MIN_READ_BYTES a read, each chunk copied out as it arrived,
 * the caller's to keep.
 */
describe("the Worker's provider answers", () => {
  /**
   * A byte stream of `pieces`, noting whether each read came with the reader's own buffer, and its
   * size; `open`: never ended after them (a provider that keeps its body open).
   */
  function bodyOf(pieces: string[], { open = false } = {}) {
    const reads: (number | null)[] = [];
    const encoder = new TextEncoder();
    let next = 0;
    const body = new ReadableStream({
      type: 'bytes',
      pull(controller) {
        const piece = pieces[next++];
        const request = controller.byobRequest;
        reads.push(request?.view ? request.view.byteLength : null);
        if (piece === undefined && open) return new Promise<void>(() => {});
        if (piece === undefined) {
          controller.close();
          request?.respond(0);
          return;
        }
        const bytes = encoder.encode(piece);
        if (request?.view) {
          new Uint8Array(request.view.buffer, request.view.byteOffset, request.view.byteLength).set(bytes);
          request.respond(bytes.byteLength);
        } else {
          controller.enqueue(bytes);
        }
      },
    });
    return { body, reads };
  }

  /** An event of a streamed answer as a provider sends it, `text` its token. */
  const event = (text: string) => `data: {"choices":[{"delta":{"content":"${text}"}}]}\n\n`;

  it('reads every chunk into the one buffer of READ_BYTES, each chunk a copy of what arrived', async () => {
    const pieces = [event('a'), event('b'), event('c')];
    const { body, reads } = bodyOf(pieces);
    const answer = answerOf(new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } }));
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('text/event-stream');
    const chunks: Uint8Array[] = [];
    for await (const chunk of answer.body ?? []) chunks.push(chunk);
    // Kept while the next reads reused the buffer: each its own copy, its size.
    expect(chunks.map((chunk) => new TextDecoder().decode(chunk))).toEqual(pieces);
    expect(chunks.every((chunk) => chunk.buffer.byteLength === chunk.byteLength)).toBe(true);
    expect(reads.length).toBeGreaterThanOrEqual(pieces.length);
    expect(reads.every((size) => size === READ_BYTES)).toBe(true);
  });

  it('reads at least MIN_READ_BYTES at a time, what is shorter joined with what follows, the end included', async () => {
    // Each shorter than the minimum: as the first bytes after a chunk's size line were handed on.
    const pieces = Array.from({ length: 9 }, (_, i) => `: ${i}\n\n`);
    const { body } = bodyOf(pieces);
    const chunks: string[] = [];
    for await (const chunk of answerOf(new Response(body)).body ?? []) chunks.push(new TextDecoder().decode(chunk));
    expect(chunks.join('')).toBe(pieces.join(''));
    // All but the last (the answer's end came before the minimum) waited for the minimum.
    expect(chunks.slice(0, -1).every((chunk) => chunk.length >= MIN_READ_BYTES)).toBe(true);
    expect(chunks.length).toBeLessThan(pieces.length);
  });

  it('reads whatever arrived once the reader says the answer is ending, a body that stays open included', async () => {
    const pieces = [event('a'), 'data: [DONE]\n\n'];
    const { body } = bodyOf(pieces, { open: true });
    const answer = answerOf(new Response(body));
    const chunks = defined(answer.body)[Symbol.asyncIterator]();
    const first = await chunks.next();
    expect(new TextDecoder().decode(first.value)).toBe(pieces[0]);
    answer.ending?.();
    const last = await chunks.next();
    expect(new TextDecoder().decode(last.value)).toBe(pieces[1]);
    await chunks.return?.();
  });

  it('cancels the body when the reader leaves early', async () => {
    let cancelled = false;
    const body = new ReadableStream({
      type: 'bytes',
      pull(controller) {
        const request = controller.byobRequest;
        if (request?.view) {
          new Uint8Array(request.view.buffer, request.view.byteOffset, 1).set([0x61]);
          request.respond(1);
        } else {
          controller.enqueue(new Uint8Array([0x61]));
        }
      },
      cancel() {
        cancelled = true;
      },
    });
    for await (const chunk of answerOf(new Response(body)).body ?? []) {
      expect(chunk.byteLength).toBe(MIN_READ_BYTES);
      break;
    }
    expect(cancelled).toBe(true);
  });
});
