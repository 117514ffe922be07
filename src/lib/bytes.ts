/** `parts` as one array of bytes, in order: the part itself when there is only one. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1 && parts[0]) return parts[0];
  let size = 0;
  for (const part of parts) size += part.byteLength;
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.byteLength;
  }
  return bytes;
}

const ALPHABET = new TextEncoder().encode('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');
const PAD = 0x3d;
/** The base64 letter of the low six bits of `n` (every index of the alphabet is a letter). */
const letter = (n: number): number => ALPHABET[n & 63] ?? PAD;
/** The byte at `at`, which the callers keep within `bytes`. */
const byteAt = (bytes: Uint8Array, at: number): number => bytes[at] ?? 0;

/**
 * `bytes` base64-encoded, as the ASCII bytes of the text, padding included: written byte by byte
 * into one array, where btoa over String.fromCharCode's strings took about 60 ms a MB here.
 */
export function base64(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(base64Length(bytes.byteLength));
  const whole = bytes.byteLength - (bytes.byteLength % 3);
  let o = 0;
  for (let i = 0; i < whole; i += 3) {
    const n = (byteAt(bytes, i) << 16) | (byteAt(bytes, i + 1) << 8) | byteAt(bytes, i + 2);
    out[o++] = letter(n >>> 18);
    out[o++] = letter(n >>> 12);
    out[o++] = letter(n >>> 6);
    out[o++] = letter(n);
  }
  const rest = bytes.byteLength - whole;
  if (rest > 0) {
    const n = (byteAt(bytes, whole) << 16) | (rest === 2 ? byteAt(bytes, whole + 1) << 8 : 0);
    out[o++] = letter(n >>> 18);
    out[o++] = letter(n >>> 12);
    out[o++] = rest === 2 ? letter(n >>> 6) : PAD;
    out[o] = PAD;
  }
  return out;
}

/**
 * Base64 of bytes that arrive in pieces: three bytes make four characters, so each piece is
 * encoded up to a multiple of three bytes and the rest carried over to the next.
 */
export class Base64Pieces {
  #carry = new Uint8Array(0);

  /** The next piece's base64 (empty when it and the carry make fewer than three bytes). */
  push(piece: Uint8Array): Uint8Array {
    const bytes = this.#carry.byteLength === 0 ? piece : concatBytes([this.#carry, piece]);
    const whole = bytes.byteLength - (bytes.byteLength % 3);
    this.#carry = bytes.slice(whole);
    return base64(bytes.subarray(0, whole));
  }

  /** The carry's base64, padded: the end of the text. */
  end(): Uint8Array {
    const last = base64(this.#carry);
    this.#carry = new Uint8Array(0);
    return last;
  }
}

/** The length of `bytes` bytes base64-encoded, padding included. */
export const base64Length = (bytes: number): number => Math.ceil(bytes / 3) * 4;
