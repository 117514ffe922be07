import type { Slices } from '../lib/slices';

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
 * Tokenizing is synchronous: the text is taken in segments of about SEGMENT_CHARS, cut before a
 * whitespace, with the event loop's slices looked at between them, so that a long document shares
 * the event loop.
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
  /** The event loop's slices (Deps.slices), which the tokenizing shares it in. */
  slices: Slices;
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
/**
 * The tokenizer, imported on first use: its tables take about 40 MB of memory, which a process
 * that never chunks a file (most of them, most of the time) should not hold.
 */
let tokenizer: Promise<typeof import('gpt-tokenizer/encoding/cl100k_base')> | undefined;
/** `<|endoftext|>` and its kind are text in a document, not special tokens. */
const NO_SPECIAL = { disallowedSpecial: new Set<string>() };

export async function chunkText(text: string, options: ChunkingOptions): Promise<Chunk[]> {
  const { tokens, charAt } = await boundaries(text, options.slices);
  const chunks: Chunk[] = [];
  for (let start = 0; ; ) {
    let end = Math.min(start + options.maxTokens, tokens);
    while (charAt[end]! < 0) end--; // end on a whole character: never over maxTokens
    const slice = text.slice(charAt[start], charAt[end]);
    if (slice.trim() !== '') {
      if (chunks.length >= options.maxChunks) throw new TooManyChunks(options.maxChunks);
      chunks.push({ text: slice, tokens: end - start, start: charAt[start]! });
    }
    if (end >= tokens) break;
    let next = end - options.overlapTokens; // overlap ≤ max / 2, so this moves forward
    while (charAt[next]! < 0) next--;
    start = next > start ? next : end;
  }
  return chunks;
}

/**
 * The number of tokens of `text`, and for each token boundary k the character offset it falls on,
 * or -1 where it cuts a character.
 */
async function boundaries(text: string, slices: Slices): Promise<{ tokens: number; charAt: Int32Array }> {
  const { decodeGenerator, encode } = await (tokenizer ??= import('gpt-tokenizer/encoding/cl100k_base'));
  const offsets: Int32Array[] = [];
  let tokens = 0;
  for (let from = 0; from < text.length; ) {
    const to = segmentEnd(text, from);
    const segment = text.slice(from, to);
    const ids = encode(segment, NO_SPECIAL);
    const charAt = new Int32Array(ids.length).fill(-1); // boundary after token i of the segment
    let pulled = 0;
    let chars = 0;
    const source = {
      *[Symbol.iterator]() {
        while (pulled < ids.length) yield ids[pulled++]!;
      },
    };
    for (const piece of decodeGenerator(source)) {
      chars += piece.length;
      charAt[pulled - 1] = from + chars;
    }
    charAt[ids.length - 1] = to;
    offsets.push(charAt);
    tokens += ids.length;
    from = to;
    while (slices.spent()) await slices.next();
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

/** Where the segment from `from` ends: SEGMENT_CHARS on, moved back to just before a whitespace. */
function segmentEnd(text: string, from: number): number {
  const limit = from + SEGMENT_CHARS;
  if (limit >= text.length) return text.length;
  for (let at = limit; at > from + SEGMENT_CHARS / 2; at--) {
    if (/\s/.test(text[at]!) && !/\s/.test(text[at - 1]!)) return at;
  }
  // No whitespace near the end: cut between two UTF-16 code units that are not a surrogate pair.
  const code = text.charCodeAt(limit);
  return code >= 0xdc00 && code <= 0xdfff ? limit - 1 : limit;
}
