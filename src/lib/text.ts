/**
 * Text measured in UTF-8 bytes without encoding it, and text built from many small pieces. Both
 * serve the bounds on what an upstream may make the gateway hold (GATEWAY_MAX_ANSWER_BYTES).
 */

/** The length of `text` encoded as UTF-8 (a lone surrogate counts 3, as TextEncoder writes U+FFFD). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) bytes += 1;
    else if (code < 0x800) bytes += 2;
    else if (isHighSurrogate(code) && isLowSurrogate(text.charCodeAt(i + 1))) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** The longest prefix of `text` whose UTF-8 length is at most `maxBytes`, never half a character. */
export function utf8Prefix(text: string, maxBytes: number): string {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const pair = isHighSurrogate(code) && isLowSurrogate(text.charCodeAt(i + 1));
    const size = code < 0x80 ? 1 : code < 0x800 ? 2 : pair ? 4 : 3;
    if (bytes + size > maxBytes) return text.slice(0, i);
    bytes += size;
    if (pair) i++;
  }
  return text;
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code < 0xdc00;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code < 0xe000;

/** Pieces are gathered until they reach this many characters, then stored. */
const SMALL_PIECE = 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A long text as the pieces it was built from, strings or UTF-8 bytes (each of whole characters),
 * meaning their concatenation: a run's answer (TextBuilder.jsonParts), as its database write takes
 * it (db/client.ts, RawValue) and as its event stream writes it (resources/runs/execution/event-stream.ts), so that
 * neither joins a text of up to GATEWAY_MAX_ANSWER_BYTES into fresh memory.
 */
export class TextParts {
  /** About its size: the UTF-16 units of its strings and the bytes of its bytes. */
  readonly length: number;

  constructor(readonly parts: readonly (string | Uint8Array)[]) {
    let length = 0;
    for (const part of parts) length += typeof part === 'string' ? part.length : part.byteLength;
    this.length = length;
  }

  toString(): string {
    return this.parts.map((part) => (typeof part === 'string' ? part : decoder.decode(part))).join('');
  }
}

/**
 * A string appended to in many pieces, such as an answer streamed a few characters per delta, or
 * 4 MiB streamed 16 KiB at a time. Runs of pieces are gathered until they add up to SMALL_PIECE
 * characters, then stored as the UTF-8 bytes of their JSON escaping (the text of a JSON string,
 * without its quotes): off the JavaScript heap, where the garbage collector copied every piece a
 * run held from one generation to the next (on a machine where memory touched for the first time
 * is slow, the collections of eight 4 MiB answers held the event loop for tens of ms each), and
 * already in the form the answer is written in (jsonParts). Each character is copied a few times
 * on its way in, and a million one-character deltas cost no more than their bytes.
 *
 * The bytes go into buffers of CHUNK_BYTES (the first ones smaller: a short answer's is not made
 * to hold 64 KiB), each filled before the next is made: a buffer per stored run of pieces made a
 * 1 MB answer a thousand buffers of 1 KiB, each an allocation of its own that outlived the
 * scavenges of the answer's time in flight, to be freed by a full collection only, among the
 * allocator's other small blocks.
 */
export class TextBuilder {
  /** The full buffers, then the one being filled (`#filled` bytes of it). */
  #chunks: Uint8Array[] = [];
  #filled = 0;
  #storedBytes = 0;
  #pending: string[] = [];
  #pendingLength = 0;

  push(piece: string): void {
    if (piece === '') return;
    this.#pending.push(piece);
    this.#pendingLength += piece.length;
    if (this.#pendingLength >= SMALL_PIECE) this.#store();
  }

  /** Whether the text is still held as a string (under SMALL_PIECE characters): nothing stored as bytes yet. */
  get short(): boolean {
    return this.#chunks.length === 0;
  }

  /**
   * The text's JSON escaping (`JSON.stringify(text)` without its quotes): the stored chunks, as
   * UTF-8 bytes, then the pieces still gathering, escaped (a short answer is never encoded).
   */
  jsonParts(): readonly (string | Uint8Array)[] {
    const pending = this.#pending.join('');
    const stored = this.#stored();
    return pending === '' ? stored : [...stored, JSON.stringify(pending).slice(1, -1)];
  }

  toString(): string {
    const pending = this.#pending.join('');
    if (this.#chunks.length === 0) return pending;
    const stored = this.#stored()
      .map((chunk) => decoder.decode(chunk))
      .join('');
    return JSON.parse(`"${stored}${JSON.stringify(pending).slice(1, -1)}"`);
  }

  /** The stored bytes: the full buffers and what the last one holds so far. */
  #stored(): Uint8Array[] {
    const last = this.#chunks.length - 1;
    return this.#chunks.map((chunk, i) => (i === last ? chunk.subarray(0, this.#filled) : chunk));
  }

  /** Stores the pending pieces, but for a high surrogate at their end, which waits for its low half. */
  #store(): void {
    const [text, carry] = cutTrailingHalf(this.#pending.join(''));
    if (text !== '') this.#write(JSON.stringify(text).slice(1, -1));
    this.#pending = carry === '' ? [] : [carry];
    this.#pendingLength = carry.length;
  }

  /** `escaped`'s UTF-8 bytes after the stored ones, in new buffers as each fills (never half a character in one). */
  #write(escaped: string): void {
    let rest = escaped;
    for (;;) {
      const last = this.#chunks.length - 1;
      const chunk = this.#chunks[last];
      if (chunk) {
        const { read, written } = encoder.encodeInto(rest, chunk.subarray(this.#filled));
        this.#filled += written;
        this.#storedBytes += written;
        rest = rest.slice(read);
        if (rest === '') return;
        // Full, but for the few bytes a character did not fit in.
        this.#chunks[last] = chunk.subarray(0, this.#filled);
      }
      // Twice the bytes stored so far, at least the rest's (UTF-8 takes at most 3 bytes a UTF-16
      // unit) and FIRST_CHUNK_BYTES, at most CHUNK_BYTES.
      const size = Math.min(CHUNK_BYTES, Math.max(2 * this.#storedBytes, 3 * rest.length, FIRST_CHUNK_BYTES));
      this.#chunks.push(new Uint8Array(size));
      this.#filled = 0;
    }
  }
}

/** The size of the buffers a TextBuilder stores a long text in. */
const CHUNK_BYTES = 64 * 1024;
/** The size of its first buffer, at least. */
const FIRST_CHUNK_BYTES = 4 * 1024;

/** `text` without the high surrogate that ends it (a pair's first half), and that surrogate, or ''. */
function cutTrailingHalf(text: string): [text: string, half: string] {
  return isHighSurrogate(text.charCodeAt(text.length - 1)) ? [text.slice(0, -1), text.slice(-1)] : [text, ''];
}

/**
 * What stands for the text in the value jsonWithText serialises: control characters around 128
 * random bits, which no text holds by chance. Drawn at first use: Workers allow no random values
 * in a module's global scope.
 */
let hole: { text: string; quoted: string } | null = null;

function theHole(): { text: string; quoted: string } {
  if (hole === null) {
    const text = `\u0000${Array.from(crypto.getRandomValues(new Uint8Array(16)), (byte) => byte.toString(16).padStart(2, '0')).join('')}\u0000`;
    hole = { text, quoted: JSON.stringify(text) };
  }
  return hole;
}

/**
 * `JSON.stringify(build(text))`, for an object that holds a long text in one place: the object is
 * serialised with a stand-in where the text goes (`build` puts `hole` there), and the text's JSON
 * string is the builder's parts (jsonParts) in its place, never joined. A text short enough to be
 * held as a string still (under SMALL_PIECE characters) gives one string, as JSON.stringify would.
 */
export function jsonWithText(build: (hole: string) => unknown, text: TextBuilder): string | TextParts {
  return jsonWithTexts(([value = '']) => build(value), [text]);
}

/**
 * jsonWithText for an object that holds several long texts, each in one place (a response's
 * output, one text per message): `build` is given one value per text, the text itself when it is
 * short, a stand-in of its own when it is not.
 */
export function jsonWithTexts(build: (values: string[]) => unknown, texts: readonly TextBuilder[]): string | TextParts {
  if (texts.every((text) => text.short)) return JSON.stringify(build(texts.map((text) => text.toString())));
  const stand = theHole().text;
  // The i-th long text's stand-in: the hole with its number before the closing control character.
  const values = texts.map((text, i) => (text.short ? text.toString() : `${stand.slice(0, -1)}${i}\u0000`));
  const json = JSON.stringify(build(values));
  const holes: { at: number; length: number; text: TextBuilder }[] = [];
  texts.forEach((text, i) => {
    if (text.short) return;
    const quoted = JSON.stringify(values[i]);
    const at = json.indexOf(quoted);
    // `build` put the stand-in in exactly one place (or the object's own strings hold it: they do not).
    if (at < 0 || json.includes(quoted, at + 1))
      throw new Error('jsonWithText: each text must appear exactly once in what build returns');
    holes.push({ at, length: quoted.length, text });
  });
  holes.sort((a, b) => a.at - b.at);
  const parts: (string | Uint8Array)[] = [];
  let from = 0;
  for (const { at, length, text } of holes) {
    parts.push(json.slice(from, at + 1), ...text.jsonParts());
    from = at + length - 1;
  }
  parts.push(json.slice(from));
  return new TextParts(parts);
}
