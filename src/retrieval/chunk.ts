/**
 * Text into chunks of at most `maxTokens` tokens, each overlapping the one before by about
 * `overlapTokens` (OpenAI's static chunking strategy; `auto` is 800 and 400), counted with
 * cl100k_base, the encoding of OpenAI's text-embedding-3 models.
 *
 * A token can end in the middle of a character (CJK, emoji: their UTF-8 bytes span tokens), so
 * chunk text is never a decode of a token window: the boundaries between tokens that fall on whole
 * characters are found once (gpt-tokenizer's decodeGenerator yields only when the text so far ends
 * on a whole character), windows end on such a boundary, and each chunk is a slice of the text.
 *
 * Tokenizing takes time linear in the text: the tokenizer's byte-pair merging is quadratic in the
 * length of one pre-tokenized piece, and a piece is a run of letters, of punctuation or of
 * whitespace (32,000 CJK characters without a space took 2.8 s, `b` x 32,000 2.2 s). So the text
 * is tokenized in segments of about SEGMENT_CHARS cut before a whitespace, and inside a segment
 * every run of non-whitespace or of whitespace longer than MAX_RUN_CHARS is cut into pieces of
 * that many characters, tokenized one by one. A cut may count a token or two more than the
 * whole run would make; each chunk is still a slice of the text.
 */

export interface Chunk {
  text: string;
  tokens: number;
  /** Where the chunk's text starts in the document (a UTF-16 offset). */
  start: number;
}

export interface ChunkingOptions {
  maxTokens: number;
  overlapTokens: number;
  /** At most this many chunks: a text that needs more is a TooManyChunks. */
  maxChunks: number;
  /** Looked at between segments: an ingestion that lost its file stops (throws its reason). */
  signal?: AbortSignal;
}

export class TooManyChunks extends Error {
  constructor(readonly maxChunks: number) {
    super(`more than ${maxChunks} chunks`);
    this.name = 'TooManyChunks';
  }
}

/** OpenAI's `auto` strategy. */
export const AUTO_CHUNKING = { maxTokens: 800, overlapTokens: 400 } as const;

const SEGMENT_CHARS = 32_768;
/** The longest run of non-whitespace (or of whitespace) tokenized in one piece: 0.5 ms of CJK here. */
export const MAX_RUN_CHARS = 256;
/**
 * The tokenizer, imported on first use: its tables take about 40 MB of memory, which a process
 * that never chunks a file (most of them, most of the time) should not hold.
 */
let tokenizer: Promise<typeof import('gpt-tokenizer/encoding/cl100k_base')> | undefined;
/** `<|endoftext|>` and its kind are text in a document, not special tokens. */
const NO_SPECIAL = { disallowedSpecial: new Set<string>() };

export async function chunkText(text: string, options: ChunkingOptions): Promise<Chunk[]> {
  const { tokens, charAt } = await boundaries(text, options.signal);
  const chunks: Chunk[] = [];
  for (let start = 0; ;) {
    let end = Math.min(start + options.maxTokens, tokens);
    while ((charAt[end] ?? 0) < 0) end--; // end on a whole character: never over maxTokens
    const slice = text.slice(charAt[start], charAt[end]);
    if (slice.trim() !== '') {
      if (chunks.length >= options.maxChunks) throw new TooManyChunks(options.maxChunks);
      chunks.push({ text: slice, tokens: end - start, start: charAt[start] ?? 0 });
    }
    if (end >= tokens) break;
    let next = end - options.overlapTokens; // overlap ≤ max / 2, so this moves forward
    while ((charAt[next] ?? 0) < 0) next--;
    start = next > start ? next : end;
  }
  return chunks;
}

/**
 * The number of tokens of `text`, and for each token boundary k the character offset it falls on,
 * or -1 where it cuts a character.
 */
async function boundaries(
  text: string,
  signal: AbortSignal | undefined,
): Promise<{ tokens: number; charAt: Int32Array }> {
  const { decodeGenerator, encode } = await (tokenizer ??= import('gpt-tokenizer/encoding/cl100k_base'));
  const offsets: Int32Array[] = [];
  let tokens = 0;
  for (let from = 0; from < text.length;) {
    const to = segmentEnd(text, from);
    for (const [start, end] of pieces(text, from, to)) {
      const ids = encode(text.slice(start, end), NO_SPECIAL);
      const charAt = new Int32Array(ids.length).fill(-1); // boundary after token i of the piece
      let pulled = 0;
      let chars = 0;
      const source = {
        *[Symbol.iterator]() {
          for (const id of ids) {
            pulled++;
            yield id;
          }
        },
      };
      for (const piece of decodeGenerator(source)) {
        chars += piece.length;
        charAt[pulled - 1] = start + chars;
      }
      charAt[ids.length - 1] = end;
      offsets.push(charAt);
      tokens += ids.length;
    }
    from = to;
    signal?.throwIfAborted();
  }
  const all = new Int32Array(tokens + 1);
  all[0] = 0;
  let at = 1;
  for (const part of offsets) {
    all.set(part, at);
    at += part.length;
  }
  return { tokens, charAt: all };
}

/**
 * The pieces of text[from, to) tokenized one at a time: the text between long runs whole, each run
 * of more than MAX_RUN_CHARS non-whitespace (or whitespace) characters in pieces of at most that
 * many (never between the two halves of a surrogate pair). One pass over the characters.
 */
export function* pieces(text: string, from: number, to: number): Generator<[number, number]> {
  let start = from;
  let runStart = from;
  let runIsSpace = false;
  for (let at = from; at < to; at++) {
    const space = isSpace(text.charCodeAt(at));
    if (at === runStart || space !== runIsSpace) {
      runStart = at;
      runIsSpace = space;
    } else if (at - Math.max(runStart, start) >= MAX_RUN_CHARS) {
      // The run is too long for one piece: cut it here, unless that splits a surrogate pair.
      const code = text.charCodeAt(at);
      const cut = code >= 0xdc00 && code <= 0xdfff ? at - 1 : at;
      if (cut > start) yield [start, cut];
      start = cut;
    }
  }
  if (to > start) yield [start, to];
}

/** Whether a UTF-16 code unit is whitespace as the tokenizer's `\s` is. */
function isSpace(code: number): boolean {
  return code <= 0x20
    ? code === 0x20 || (code >= 0x09 && code <= 0x0d)
    : code >= 0xa0 &&
        (code === 0xa0 ||
          code === 0x1680 ||
          (code >= 0x2000 && code <= 0x200a) ||
          code === 0x2028 ||
          code === 0x2029 ||
          code === 0x202f ||
          code === 0x205f ||
          code === 0x3000 ||
          code === 0xfeff);
}

/** Where the segment from `from` ends: SEGMENT_CHARS on, moved back to just before a whitespace. */
function segmentEnd(text: string, from: number): number {
  const limit = from + SEGMENT_CHARS;
  if (limit >= text.length) return text.length;
  for (let at = limit; at > from + SEGMENT_CHARS / 2; at--) {
    if (isSpace(text.charCodeAt(at)) && !isSpace(text.charCodeAt(at - 1))) return at;
  }
  // No whitespace near the end: cut between two UTF-16 code units that are not a surrogate pair.
  const code = text.charCodeAt(limit);
  return code >= 0xdc00 && code <= 0xdfff ? limit - 1 : limit;
}
