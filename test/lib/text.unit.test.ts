import { defined } from '../support/defined';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonWithText, jsonWithTexts, TextBuilder, TextParts } from '../../src/lib/text';

/**
 * Text held in pieces (src/lib/text.ts): a run's answer is kept as the JSON escaping of the
 * pieces it was streamed in, encoded chunk by chunk. Whatever the pieces, surrogate pairs cut
 * between them and lone surrogates included, that must give exactly what the joined text would.
 */

/** Pieces of text where surrogates are common: halves of pairs, whole pairs, lone ones, ASCII. */
const pieces = fc.array(
  fc.string({ unit: fc.constantFrom('a', '"', '\n', 'é', '\ud83d', '\ude00', '\ud83d\ude00', '\u0001'), maxLength: 6 }),
  { maxLength: 8 },
);

describe('TextBuilder', () => {
  const build = (given: string[]) => {
    const builder = new TextBuilder();
    for (const piece of given) builder.push(piece);
    return builder;
  };
  const decoded = (chunks: readonly (string | Uint8Array)[]) =>
    chunks.map((chunk) => (typeof chunk === 'string' ? chunk : new TextDecoder().decode(chunk))).join('');

  it('holds the JSON escaping of the text, as JSON.stringify escapes it joined, and gives the text back', () => {
    fc.assert(
      fc.property(pieces, (given) => {
        const builder = build(given);
        expect(`"${decoded(builder.jsonParts())}"`).toBe(JSON.stringify(given.join('')));
        expect(builder.toString()).toBe(given.join(''));
      }),
      { numRuns: 2000 },
    );
  });

  it('stores long answers in chunks, none cutting a pair, runs of small pieces gathered', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.string({ maxLength: 40 }),
            fc.string({ minLength: 1024, maxLength: 1100 }),
            fc.constantFrom('\ud83d', '\ude00'),
          ),
          { maxLength: 60 },
        ),
        (given) => {
          const builder = build(given);
          const chunks = builder.jsonParts();
          // A pair cut between chunks would be escaped as two \\u escapes; the joined text keeps it whole.
          expect(decoded(chunks)).toBe(JSON.stringify(given.join('')).slice(1, -1));
          // Runs of small pieces are gathered: no two short chunks in a row but at the end.
          for (let i = 1; i < chunks.length - 1; i++)
            expect(defined(chunks[i - 1]).length >= 1024 || defined(chunks[i]).length >= 1024).toBe(true);
          expect(builder.toString()).toBe(given.join(''));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('keeps a long answer in few buffers, however small its pieces', () => {
    // A 1 MiB answer in deltas of 1 KiB: one buffer per stored run of pieces made it a thousand.
    const builder = build(Array.from({ length: 1024 }, (_, i) => `${i % 10}`.repeat(1024)));
    const stored = builder.jsonParts().filter((part) => typeof part !== 'string');
    expect(stored.reduce((bytes, part) => bytes + part.byteLength, 0)).toBe(1024 * 1024);
    expect(stored.length).toBeLessThanOrEqual(20);
  });
});

describe('jsonWithText', () => {
  const message = (value: string) => ({
    id: 'msg_1',
    content: [{ type: 'text', text: { value, annotations: [] } }],
    metadata: { note: 'a "quoted" \\ note' },
  });

  it('is JSON.stringify of the object with the text in its place, the text never joined', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            pieces.map((given) => given.join('')),
            fc.string({ minLength: 1024, maxLength: 1100 }),
          ),
          { maxLength: 12 },
        ),
        (given) => {
          const builder = new TextBuilder();
          for (const piece of given) builder.push(piece);
          const json = jsonWithText(message, builder);
          expect(json.toString()).toBe(JSON.stringify(message(given.join(''))));
          const stored = builder.jsonParts().filter((part) => typeof part !== 'string');
          // A text still held as a string gives one string; a longer one, parts: its stored chunks
          // themselves (the memory they are in), none of them copied.
          expect(json instanceof TextParts).toBe(stored.length > 0);
          if (json instanceof TextParts) {
            const memory = json.parts.flatMap((part) => (typeof part === 'string' ? [] : [part.buffer]));
            for (const chunk of stored) expect(memory).toContain(chunk.buffer);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('is not fooled by a text or object that looks like its stand-in', () => {
    const builder = new TextBuilder();
    const text = `\u0000deadbeef\u0000 "\u0000" ${'y'.repeat(2000)}`;
    builder.push(text);
    const json = jsonWithText((value) => ({ before: '\u0000', value, after: '\u0000\u0000' }), builder);
    expect(json).toBeInstanceOf(TextParts);
    expect(JSON.parse(json.toString())).toEqual({ before: '\u0000', value: text, after: '\u0000\u0000' });
  });

  it('refuses an object without the text, or with it twice', () => {
    const builder = new TextBuilder();
    builder.push('x'.repeat(2000));
    expect(() => jsonWithText(() => ({ value: 'no text here' }), builder)).toThrow('exactly once');
    expect(() => jsonWithText((value) => ({ a: value, b: value }), builder)).toThrow('exactly once');
  });
});

describe('jsonWithTexts', () => {
  const output = (values: string[]) => ({
    output: values.map((text, i) => ({ id: `msg_${i}`, content: [{ type: 'output_text', text }] })),
  });

  it('is JSON.stringify of the object with each text in its place, long or short, in any order', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.array(fc.oneof(fc.string({ maxLength: 40 }), fc.string({ minLength: 1024, maxLength: 1100 })), {
            maxLength: 4,
          }),
          { maxLength: 5 },
        ),
        fc.boolean(),
        (texts, reversed) => {
          const builders = texts.map((given) => {
            const builder = new TextBuilder();
            for (const piece of given) builder.push(piece);
            return builder;
          });
          const build = (values: string[]) => output(reversed ? [...values].reverse() : values);
          const json = jsonWithTexts(build, builders);
          expect(json.toString()).toBe(JSON.stringify(build(texts.map((given) => given.join('')))));
          expect(json instanceof TextParts).toBe(builders.some((builder) => !builder.short));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuses an object that leaves out a long text', () => {
    const long = new TextBuilder();
    long.push('x'.repeat(2000));
    expect(() => jsonWithTexts(([first]) => ({ first }), [new TextBuilder(), long])).toThrow('exactly once');
  });
});
