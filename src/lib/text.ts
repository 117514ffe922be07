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
    else if (code >= 0xd800 && code < 0xdc00 && isLowSurrogate(text.charCodeAt(i + 1))) {
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
    const pair = code >= 0xd800 && code < 0xdc00 && isLowSurrogate(text.charCodeAt(i + 1));
    const size = code < 0x80 ? 1 : code < 0x800 ? 2 : pair ? 4 : 3;
    if (bytes + size > maxBytes) return text.slice(0, i);
    bytes += size;
    if (pair) i++;
  }
  return text;
}

const isLowSurrogate = (code: number) => code >= 0xdc00 && code < 0xe000;

/** Pieces shorter than this are joined with their neighbours; longer ones are kept as they are. */
const SMALL_PIECE = 1024;

/**
 * A string appended to in many small pieces, such as an answer streamed a few characters per
 * delta. Held as an array of every piece, or as a `+=` rope, a million one-character deltas would
 * cost tens of bytes each; here runs of small pieces are joined once they add up to SMALL_PIECE,
 * and large pieces are kept whole, so that each character is copied at most twice (once more by
 * toString) and at most one piece in SMALL_PIECE characters is held apart.
 */
export class TextBuilder {
  #pieces: string[] = [];
  #small: string[] = [];
  #smallLength = 0;

  push(piece: string): void {
    if (piece === '') return;
    if (piece.length >= SMALL_PIECE) {
      this.#flushSmall();
      this.#pieces.push(piece);
      return;
    }
    this.#small.push(piece);
    this.#smallLength += piece.length;
    if (this.#smallLength >= SMALL_PIECE) this.#flushSmall();
  }

  toString(): string {
    this.#flushSmall();
    const text = this.#pieces.join('');
    this.#pieces = text ? [text] : [];
    return text;
  }

  /** The text as the pieces it is held in, not joined: their concatenation is toString(). */
  parts(): readonly string[] {
    this.#flushSmall();
    return [...this.#pieces];
  }

  #flushSmall(): void {
    if (this.#small.length === 0) return;
    this.#pieces.push(this.#small.join(''));
    this.#small = [];
    this.#smallLength = 0;
  }
}

/**
 * `pieces` cut again where needed so that no piece ends inside a surrogate pair (the high half
 * moves to the next piece): pieces that can be encoded or escaped one by one, each then standing
 * for whole characters. Empty pieces are left out.
 */
export function wholeCharacterPieces(pieces: readonly string[]): string[] {
  const whole: string[] = [];
  let carry = '';
  for (const piece of pieces) {
    let text = carry + piece;
    carry = '';
    const last = text.charCodeAt(text.length - 1);
    if (last >= 0xd800 && last < 0xdc00) {
      carry = text.slice(-1);
      text = text.slice(0, -1);
    }
    if (text !== '') whole.push(text);
  }
  if (carry !== '') whole.push(carry);
  return whole;
}

/**
 * `JSON.stringify` of the concatenation of `pieces`, without its quotes, as pieces: the same
 * characters as escaping the joined text, without ever holding it whole.
 */
export function jsonStringParts(pieces: readonly string[]): string[] {
  return wholeCharacterPieces(pieces).map((piece) => JSON.stringify(piece).slice(1, -1));
}
