import { describe, expect, it } from 'vitest';
import { base64, Base64Pieces, base64Length } from '../../src/lib/bytes';

/** Base64 of bytes (src/lib/bytes.ts), whole and as chunks arrive, against Node's own encoder. */

const decoder = new TextDecoder();
const random = (length: number) => crypto.getRandomValues(new Uint8Array(length));

describe('base64', () => {
  it('encodes every length of a few bytes, and a large array, as Node does, padding included', () => {
    for (let length = 0; length < 64; length++) {
      const bytes = random(length);
      const encoded = base64(bytes);
      expect(decoder.decode(encoded)).toBe(Buffer.from(bytes).toString('base64'));
      expect(encoded.byteLength).toBe(base64Length(length));
    }
    const large = new Uint8Array(1024 * 1024 + 1).map((_, i) => i % 256);
    expect(decoder.decode(base64(large))).toBe(Buffer.from(large).toString('base64'));
  });

  it('encodes pieces as they come, however they are cut, as the whole', () => {
    const whole = random(10_000);
    for (const cuts of [[0], [1], [2], [3, 3, 3], [5000, 1, 1, 1], [9_999]]) {
      const pieces = new Base64Pieces();
      let text = '';
      let at = 0;
      for (const size of [...cuts, whole.byteLength]) {
        text += decoder.decode(pieces.push(whole.subarray(at, Math.min(at + size, whole.byteLength))));
        at = Math.min(at + size, whole.byteLength);
      }
      text += decoder.decode(pieces.end());
      expect(text).toBe(Buffer.from(whole).toString('base64'));
    }
  });
});
