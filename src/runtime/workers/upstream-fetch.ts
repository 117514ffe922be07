import type { UpstreamAnswer, UpstreamFetch } from '../../providers/types';

/**
 * How many times a call is sent again after workerd reports its connection lost before any answer
 * (see workersUpstreamFetch).
 */
const LOST_CONNECTION_RETRIES = 2;

/**
 * The most bytes one read of an answer takes: the size of the one buffer each answer is read into
 * (answerOf). A server-sent event stream's reads are a few hundred bytes each; a long answer arriving
 * at once takes a read per READ_BYTES.
 */
export const READ_BYTES = 16 * 1024;

/**
 * The fewest bytes a read of an answer waits for (or its end). workerd reads a chunked answer's
 * size line into 32 bytes and hands what followed it in them on at once: without a minimum, each
 * chunk of a provider's stream (one server-sent event) came as two reads, the first of about 27
 * bytes, each resuming this isolate (counted with uprobes on workerd's IoContext::runImpl: a
 * streamed run of 64 words 214 entries into JavaScript, 158 with it). With it the rest of the chunk,
 * already received, is read with its start. Only an event shorter than this waits for the next
 * bytes: no event that carries a token is (`data: {"choices":[{"delta":{"content":"x"}}]}` is 49
 * bytes); a keep-alive comment may be (not progress: the reader's idle limit goes on), and so is
 * the last, `data: [DONE]`, which is why a read after a reader called `ending` waits for no minimum.
 */
export const MIN_READ_BYTES = 32;

/**
 * Workers' upstream client: the runtime's fetch, with one failure taken care of. workerd keeps the
 * connections to an upstream open between calls, and one that the upstream closed while it sat
 * idle (HTTP servers close idle connections when they like: Node's and uvicorn's after 5 s) can be
 * handed to the next call before the runtime has noticed the close, the more often the busier its
 * machine. That call fails before any byte of an answer with `Network connection lost.`, an error
 * the runtime marks `retryable`, and it is sent again, up to LOST_CONNECTION_RETRIES times, within
 * the call's own deadline (its signal), a turn of the event loop later: by then the runtime has
 * dropped the other connections the upstream closed (sent again at once, a call met one of them).
 * Nothing else is sent again: not another failure, not a call whose signal aborted, never a call
 * whose answer had begun. A connection lost after the request was sent is reported the same way,
 * so a provider may on rare occasions receive a call twice and answer the first to no one, as the
 * official SDKs' retries of a lost connection do.
 */
export function workersUpstreamFetch(fetch: (url: string, init: RequestInit) => Promise<Response>): UpstreamFetch {
  return async (url, init) => {
    for (let retries = LOST_CONNECTION_RETRIES; ; retries--) {
      try {
        return answerOf(await fetch(url, init));
      } catch (error) {
        if (retries === 0 || init.signal?.aborted || !isRetryable(error)) throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
  };
}

/** workerd's own verdict on a failed I/O call: `retryable` set on the error it throws. */
function isRetryable(error: unknown): boolean {
  return error instanceof Error && 'retryable' in error && error.retryable === true;
}

/**
 * `response` as a provider call reads it: its body read into one buffer of READ_BYTES, at least
 * MIN_READ_BYTES a read until the reader calls `ending`, each read's bytes copied out (a chunk the
 * size of what arrived, the caller's to keep). The runtime's own reader allocates a new buffer for
 * every read, and a streamed answer is a read per token or two (docs/workers.md, "What a run costs
 * on Workers"). Leaving the loop early cancels the body, as the runtime's iterator does.
 */
export function answerOf(response: Response): UpstreamAnswer {
  const { body } = response;
  const reads = { min: MIN_READ_BYTES };
  return {
    status: response.status,
    headers: response.headers,
    body: body && { [Symbol.asyncIterator]: () => chunksOf(body, reads) },
    ending: () => {
      reads.min = 1;
    },
  };
}

function chunksOf(body: ReadableStream<Uint8Array>, reads: { min: number }): AsyncIterator<Uint8Array> {
  let reader: ReadableStreamBYOBReader;
  try {
    reader = body.getReader({ mode: 'byob' });
  } catch {
    // A body that is not a byte stream (one made in JavaScript) is read as it comes.
    return body[Symbol.asyncIterator]();
  }
  let buffer = new ArrayBuffer(READ_BYTES);
  return {
    async next() {
      const { done, value } = await reader.readAtLeast(reads.min, new Uint8Array(buffer));
      if (done) return { done: true, value: undefined };
      // The buffer comes back (moved into `value`) for the next read.
      buffer = value.buffer;
      return { done: false, value: value.slice() };
    },
    async return() {
      await reader.cancel();
      return { done: true, value: undefined };
    },
  };
}
