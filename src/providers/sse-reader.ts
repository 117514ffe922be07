import { createParser } from 'eventsource-parser';
import { concatBytes } from '../lib/bytes';
import { UNSLICED, type Slices } from '../lib/slices';
import { UpstreamError } from './types';
import { release } from '../lib/bounded-read';

/**
 * Reads an upstream `text/event-stream` body incrementally and yields the data of the events each
 * chunk completed, together (a chunk can hold thousands of tiny events: one step each would cost
 * more than the events themselves), bounded:
 * a line longer than `maxLineBytes` (counted on the wire, in bytes) or an event whose buffered
 * data exceeds `maxEventChars` fails the read, so an upstream can make the reader hold no more
 * than that. Parsing is eventsource-parser's (every line terminator, multi-line data, chunk
 * boundaries anywhere), which is linear in its input however the lines are cut.
 *
 * `onActivity` reports progress towards an answer: a chunk that completed an event, or that
 * carried more of a `data:` line still arriving. Comments (`: keep-alive`), blank lines and other
 * fields are not progress, so an upstream sending only those still counts as silent.
 *
 * A chunk is parsed FEED_CHARS at a time, within the event loop's `slices`: a read of 64 KiB of
 * tiny events is three thousand of them, a few ms to frame, and several upstreams' reads land in
 * the same turn of the event loop. A chunk that arrives once the slice is spent waits for the
 * next one before any of it is looked at: chunks arrive in the poll phase, where each upstream's
 * read would otherwise scan, decode and frame its first part whatever the slice had left.
 *
 * The bytes after a chunk's last line ending (a line still arriving) are kept as bytes and
 * decoded with the chunk that ends the line. A line that arrives over many reads (a long answer's
 * chunk, or an upstream's endless line up to `maxLineBytes`, refused before it is ever decoded)
 * is thus not held as the text of its pieces, young strings that every scavenge copies (in the
 * hostile suite's framing scenario, scavenges of 8 to 66 ms), but decoded once, into one string,
 * which V8 allocates outside the young generation when it is large.
 */
export async function* readServerSentData(
  body: AsyncIterable<Uint8Array>,
  limits: { maxLineBytes: number; maxEventChars: number },
  onActivity?: () => void,
  /**
   * `stopped`: whether the consumer stopped at the stream's natural end (`[DONE]`), so that the
   * body may end by itself (letEnd); `cut` cuts it where a read is pending (the call's abort).
   */
  end?: { stopped: () => boolean; cut: () => void },
  slices: Slices = UNSLICED,
): AsyncGenerator<string[]> {
  const chunks = body[Symbol.asyncIterator]();
  const decoder = new TextDecoder();
  const events: string[] = [];
  let overflow = false;
  const parser = createParser({
    onEvent: (event) => events.push(event.data),
    onError: (error) => {
      if (error.type === 'max-buffer-size-exceeded') overflow = true;
    },
    maxBufferSize: limits.maxEventChars,
  });
  const line = new LineTracker();
  /** The bytes of the line still arriving (after the last line ending read). */
  let unfinished: Uint8Array[] = [];
  try {
    for (;;) {
      // Asking for the next chunk is work too: what the socket holds while the reader was busy is
      // handed over joined (a copy of up to 64 KiB), so it waits for room in a slice as well.
      while (slices.spent()) await slices.next();
      const { done, value } = await chunks.next();
      if (done) break;
      while (slices.spent()) await slices.next();
      const dataGrew = line.advance(value);
      if (line.bytes > limits.maxLineBytes) {
        throw new UpstreamError(
          'protocol',
          `The upstream sent a server-sent event line longer than ${limits.maxLineBytes} bytes.`,
        );
      }
      const ended = line.lastEnd + 1;
      if (ended === 0) {
        unfinished.push(value);
        if (dataGrew) onActivity?.();
        continue;
      }
      let text: string;
      if (unfinished.length === 0 && ended === value.length) {
        // The usual chunk: whole events, nothing held.
        text = decoder.decode(value, { stream: true });
      } else {
        unfinished.push(value.subarray(0, ended));
        text = decoder.decode(concatBytes(unfinished), { stream: true });
        unfinished = ended < value.length ? [value.subarray(ended)] : [];
      }
      for (let at = 0; at < text.length; at += FEED_CHARS) {
        while (at > 0 && slices.spent()) await slices.next();
        parser.feed(text.slice(at, at + FEED_CHARS));
        if (overflow) {
          throw new UpstreamError(
            'protocol',
            `The upstream sent a server-sent event larger than ${limits.maxEventChars} characters.`,
          );
        }
        if (events.length > 0 || dataGrew) onActivity?.();
        if (events.length > 0) yield events.splice(0);
      }
    }
    // A last event without its blank line still counts, as it would with one.
    const rest = unfinished.length > 0 ? decoder.decode(concatBytes(unfinished), { stream: true }) : '';
    parser.feed(`${rest}${decoder.decode()}\n\n`);
    if (events.length > 0) yield events.splice(0);
  } finally {
    // A consumer that stopped at `[DONE]` leaves the rest to end by itself, in the background;
    // any other early stop cancels the body, which closes the upstream connection.
    if (end?.stopped()) void letEnd(chunks, end.cut);
    else await release(chunks);
  }
}

/** How much of a chunk's text is parsed before the event loop's slice is looked at. */
const FEED_CHARS = 16 * 1024;

/** What an upstream may still send after `[DONE]`, and for how long, before its connection is dropped. */
const AFTER_END = { bytes: 1024, ms: 1000 };

/**
 * Reads what follows `[DONE]` (usually nothing: the body's end is on its way), so that a body that
 * ends soon lets its connection go back to the pool (runtime/node/upstream-fetch.ts keeps them per
 * origin) instead of closing it: without this, nearly every run opened a new connection to its
 * provider, a TLS handshake each over HTTPS. Bounded: more than AFTER_END.bytes, or no end within
 * AFTER_END.ms, and the body is cut (`cut`: a pending read holds the iterator, which only the
 * call's abort releases) and cancelled as before. Never throws.
 */
async function letEnd(chunks: AsyncIterator<Uint8Array>, cut: () => void): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(resolve, AFTER_END.ms, 'late')));
  let bytes = 0;
  try {
    for (;;) {
      const next = chunks.next();
      // Left pending when the time runs out: cutting the body settles it.
      next.catch(() => undefined);
      const result = await Promise.race([next, late]);
      if (result === 'late') break;
      if (result.done) return;
      bytes += result.value.byteLength;
      if (bytes > AFTER_END.bytes) break;
    }
  } catch {
    return;
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
  cut();
  await release(chunks);
}

const DATA_FIELD = 'data:';

/**
 * The line being received, tracked on the raw bytes: its length so far and its first bytes, so
 * that a line's size is bounded before it is decoded and a `data:` line still arriving can count
 * as activity. Each chunk is scanned once, from its end.
 */
class LineTracker {
  bytes = 0;
  /** Where the last chunk's last line ending (LF or CR) is, or -1 if it has none. */
  lastEnd = -1;
  #head = '';

  /** Takes the next chunk; answers whether it added to a `data:` line that is still open. */
  advance(chunk: Uint8Array): boolean {
    const end = Math.max(chunk.lastIndexOf(10), chunk.lastIndexOf(13));
    this.lastEnd = end;
    const start = end + 1;
    if (end !== -1) {
      this.bytes = 0;
      this.#head = '';
    }
    this.bytes += chunk.length - start;
    for (let i = start; i < chunk.length && this.#head.length < DATA_FIELD.length; i++) {
      this.#head += String.fromCharCode(chunk[i] ?? 0);
    }
    return chunk.length > start && this.#head === DATA_FIELD;
  }
}
