import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonStringParts, TextBuilder, wholeCharacterPieces } from '../src/lib/text';

/**
 * Text held and written in pieces (src/lib/text.ts): a run's answer is kept as the pieces it was
 * streamed in, escaped as JSON piece by piece and encoded piece by piece for the embedded
 * database's writer thread. Whatever the pieces, surrogate pairs cut between them and lone
 * surrogates included, that must give exactly what the joined text would.
 */

/** Pieces of text where surrogates are common: halves of pairs, whole pairs, lone ones, ASCII. */
const pieces = fc.array(
  fc.string({ unit: fc.constantFrom('a', '"', '\n', 'é', '\ud83d', '\ude00', '\ud83d\ude00', '\u0001'), maxLength: 6 }),
  { maxLength: 8 },
);

describe('wholeCharacterPieces', () => {
  it('keeps the text and cuts no piece inside a surrogate pair', () => {
    fc.assert(
      fc.property(pieces, (given) => {
        const whole = wholeCharacterPieces(given);
        expect(whole.join('')).toBe(given.join(''));
        for (const piece of whole) {
          expect(piece).not.toBe('');
          const last = piece.charCodeAt(piece.length - 1);
          const next = whole[whole.indexOf(piece) + 1];
          // A high surrogate ends a piece only when the next does not begin with its low half.
          if (last >= 0xd800 && last < 0xdc00 && next !== undefined) expect(/^[\udc00-\udfff]/.test(next)).toBe(false);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('gives pieces that encode, one by one, to the bytes of the joined text', () => {
    const encoder = new TextEncoder();
    fc.assert(
      fc.property(pieces, (given) => {
        const bytes = Buffer.concat(wholeCharacterPieces(given).map((piece) => encoder.encode(piece)));
        expect(bytes).toEqual(Buffer.from(encoder.encode(given.join(''))));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('jsonStringParts', () => {
  it('escapes as JSON.stringify escapes the joined text', () => {
    fc.assert(
      fc.property(pieces, (given) => {
        expect(`"${jsonStringParts(given).join('')}"`).toBe(JSON.stringify(given.join('')));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('TextBuilder', () => {
  it('holds the text as pieces whose concatenation is the text, small ones joined', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.string({ maxLength: 40 }), fc.string({ minLength: 1024, maxLength: 1100 })), { maxLength: 60 }), (given) => {
        const builder = new TextBuilder();
        for (const piece of given) builder.push(piece);
        const parts = builder.parts();
        expect(parts.join('')).toBe(given.join(''));
        // Runs of small pieces come out joined: no two short parts in a row.
        for (let i = 1; i < parts.length; i++) expect(parts[i - 1]!.length >= 1024 || parts[i]!.length >= 1024).toBe(true);
        expect(builder.toString()).toBe(given.join(''));
      }),
      { numRuns: 300 },
    );
  });
});
