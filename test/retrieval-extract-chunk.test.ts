import { encode } from 'gpt-tokenizer/encoding/cl100k_base';
import { describe, expect, it } from 'vitest';
import { UNSLICED, type Slices } from '../src/lib/slices';
import { AUTO_CHUNKING, chunkText, TooManyChunks } from '../src/retrieval/chunk';
import { threadParsers } from '../src/node/extract-thread';
import { extract, ExtractionError, formatOf, inlineParsers, type Parsers } from '../src/retrieval/extract';
import { fixture } from './support/files';

/** Token chunking (retrieval/chunk.ts), format detection (retrieval/extract.ts) and Node's extraction thread. */

const tokens = (text: string) => encode(text, { disallowedSpecial: new Set() }).length;

describe('chunkText', () => {
  it('never cuts a character, never exceeds the size, and leaves no gap between chunks', async () => {
    const unit = 'Zürich 東京 😀👍🏽 naïve café — 中文字符测试 ';
    const text = Array.from({ length: 400 }, (_, i) => `${i} ${unit}`).join('');
    const chunks = await chunkText(text, { maxTokens: 100, overlapTokens: 30, maxChunks: 1000, slices: UNSLICED });
    expect(chunks.length).toBeGreaterThan(10);
    let covered = 0;
    for (const chunk of chunks) {
      expect(chunk.text).not.toContain('\uFFFD');
      expect(chunk.tokens).toBeLessThanOrEqual(100);
      expect(tokens(chunk.text)).toBeLessThanOrEqual(100);
      expect(text.slice(chunk.start, chunk.start + chunk.text.length)).toBe(chunk.text);
      expect(chunk.start).toBeLessThanOrEqual(covered); // starts at or before where the previous one ended
      covered = Math.max(covered, chunk.start + chunk.text.length);
    }
    expect(covered).toBe(text.length);
  });

  it('overlaps consecutive chunks by about the overlap, with auto’s 800/400', async () => {
    const text = Array.from({ length: 3000 }, (_, i) => `w${i}`).join(' ');
    const chunks = await chunkText(text, { ...AUTO_CHUNKING, maxChunks: 100, slices: UNSLICED });
    expect(chunks[0]!.tokens).toBe(800);
    const overlap = chunks[0]!.text.slice(chunks[0]!.text.length - 200);
    expect(chunks[1]!.text).toContain(overlap);
  });

  it('tokenizes long texts in segments, looking at the event loop\'s slices between them, and keeps special-token text as text', async () => {
    let looks = 0;
    const counted: Slices = { spent: () => (looks++, false), next: () => Promise.resolve() };
    const text = `${'plain words here '.repeat(6000)}<|endoftext|> the end`;
    const chunks = await chunkText(text, { maxTokens: 4096, overlapTokens: 0, maxChunks: 100, slices: counted });
    expect(looks).toBeGreaterThan(2);
    expect(chunks.map((c) => c.text).join('')).toBe(text);
    expect(chunks.at(-1)!.text).toContain('<|endoftext|> the end');
  });

  it('refuses a text that needs more chunks than allowed', async () => {
    const text = 'word '.repeat(5000);
    await expect(chunkText(text, { maxTokens: 100, overlapTokens: 0, maxChunks: 10, slices: UNSLICED })).rejects.toBeInstanceOf(TooManyChunks);
  });
});

describe('formatOf', () => {
  it.each([
    ['a.md', null, 'text'],
    ['a.PY', null, 'text'],
    ['page.htm', null, 'html'],
    ['x.pdf', 'application/octet-stream', 'pdf'],
    ['x.docx', null, 'docx'],
    ['noext', 'text/plain; charset=utf-8', 'text'],
    ['noext', 'application/pdf', 'pdf'],
    ['x.png', 'image/png', null],
    ['x.bin', null, null],
  ])('%s (%s) is %s', (name, type, format) => {
    expect(formatOf(name, type)).toBe(format);
  });
});

describe('the extraction thread', () => {
  const parsers = threadParsers({ timeoutMs: 60_000, maxHeapMb: 256 });
  const options = (which: Parsers) => ({ maxChars: 1_000_000, slices: UNSLICED, parsers: which });

  it.each([
    ['sample.html', 'html'],
    ['sample.docx', 'docx'],
  ] as const)('parses %s as the inline parsers do', async (name, format) => {
    const bytes = fixture(name);
    const inThread = await extract(bytes, format, options(parsers));
    expect(inThread).toContain('PAPAYA-42');
    expect(inThread).toBe(await extract(bytes, format, options(inlineParsers)));
  });

  it('refuses what it cannot read, and goes on parsing', async () => {
    const error = await extract(fixture('corrupt.pdf'), 'docx', options(parsers)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ExtractionError);
    expect((error as ExtractionError).message).toContain('The DOCX file cannot be read');
    expect(await extract(fixture('sample.html'), 'html', options(parsers))).toContain('Refund policy');
  });
});
