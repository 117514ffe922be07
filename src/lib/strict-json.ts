/**
 * What JSON.parse accepts but a request body must not carry, found in one pass over the text:
 *
 * - a key twice in one object: JSON.parse keeps the last, another parser (a proxy, a WAF, the
 *   client's own logs) may keep the first, so the gateway and they would act on different requests;
 * - a `__proto__` key: zod's records drop it silently, and code that copies objects may treat it
 *   as the prototype rather than as data;
 * - a string with NUL or an unpaired surrogate (only possible as `\u` escapes, since the text was
 *   decoded from UTF-8): the embedded database cuts text at a NUL when reading it back, and UTF-8
 *   storage turns a lone surrogate into U+FFFD, so the value stored would not be the value sent;
 * - nesting deeper than `maxDepth`: every consumer after this one may recurse.
 *
 * Iterative, so no input can exhaust the stack. Runs on text that JSON.parse already accepted.
 */

export type JsonProblem =
  | { kind: 'too_deep'; path: (string | number)[] }
  | { kind: 'duplicate_key' | 'proto_key' | 'bad_key'; key: string; path: (string | number)[] }
  | { kind: 'bad_string'; path: (string | number)[] };

interface Frame {
  /** Keys seen so far; null for an array. */
  keys: Set<string> | null;
  /** The current key, or index in an array. */
  at: string | number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether a decoded string can be stored and read back unchanged. */
export const isStorableString = (value: string) => !value.includes('\0') && !LONE_SURROGATE.test(value);

export function inspectJson(text: string, options: { maxDepth: number }): JsonProblem | null {
  const frames: Frame[] = [];
  const path = (last?: string) => {
    const parts = frames.map((frame) => frame.at);
    if (last !== undefined) parts[parts.length - 1] = last;
    return parts;
  };
  let expectingKey = false;
  for (let i = 0; i < text.length; i++) {
    switch (text.charCodeAt(i)) {
      case QUOTE: {
        const end = closingQuote(text, i);
        const raw = text.slice(i + 1, end);
        // Unescaped, a string cannot hold NUL (JSON.parse refuses raw control characters) nor a
        // lone surrogate (the text was decoded from UTF-8): only escaped strings need decoding.
        const escaped = raw.includes('\\');
        const value = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        const storable = !escaped || isStorableString(value);
        i = end;
        const top = frames[frames.length - 1];
        if (expectingKey && top?.keys) {
          expectingKey = false;
          if (!storable) return { kind: 'bad_key', key: value, path: path().slice(0, -1) };
          if (value === '__proto__') return { kind: 'proto_key', key: value, path: path(value) };
          if (top.keys.has(value)) return { kind: 'duplicate_key', key: value, path: path(value) };
          top.keys.add(value);
          top.at = value;
        } else if (!storable) {
          return { kind: 'bad_string', path: path() };
        }
        break;
      }
      case 0x7b: // {
      case 0x5b: {
        // [
        if (frames.length >= options.maxDepth) return { kind: 'too_deep', path: path() };
        const object = text.charCodeAt(i) === 0x7b;
        frames.push({ keys: object ? new Set() : null, at: object ? '' : 0 });
        expectingKey = object;
        break;
      }
      case 0x7d: // }
      case 0x5d: // ]
        frames.pop();
        expectingKey = false;
        break;
      case 0x2c: {
        // ,
        const top = frames.at(-1);
        // A comma outside any object or array is no JSON, which the parser has refused already.
        if (!top) break;
        if (top.keys) expectingKey = true;
        else top.at = (top.at as number) + 1;
        break;
      }
    }
  }
  return null;
}

/** The index of the quote that closes the string opening at `start`. */
function closingQuote(text: string, start: number): number {
  let from = start + 1;
  for (;;) {
    const quote = text.indexOf('"', from);
    if (quote === -1) return text.length; // unreachable on text JSON.parse accepted
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
    from = quote + 1;
  }
}
