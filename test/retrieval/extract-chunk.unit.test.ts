import { defined } from '../support/defined';
import { encode } from 'gpt-tokenizer/encoding/cl100k_base';
import pako from 'pako';
import { describe, expect, it } from 'vitest';
import { AUTO_CHUNKING, chunkText, MAX_RUN_CHARS, pieces, TooManyChunks } from '../../src/retrieval/chunk';
import { extract, ExtractionError, formatOf, type ExtractionLimits } from '../../src/retrieval/extract';
import { inflatedSize, pdfInflatedBytes } from '../../src/retrieval/inflation';
import { deflated, deflatedBlanks, docx, docxBomb, pdf, zip } from '../support/documents';
import { fixture } from '../support/files';

/** Token chunking (retrieval/chunk.ts), format detection and extraction with its bounds (retrieval/extract.ts, inflation.ts). */

const tokens = (text: string) => encode(text, { disallowedSpecial: new Set() }).length;
const MIB = 1024 * 1024;

describe('chunkText', () => {
  it('never cuts a character, never exceeds the size, and leaves no gap between chunks', async () => {
    const unit = 'Zürich 東京 😀👍🏽 naïve café — 中文字符测试 ';
    const text = Array.from({ length: 400 }, (_, i) => `${i} ${unit}`).join('');
    const chunks = await chunkText(text, { maxTokens: 100, overlapTokens: 30, maxChunks: 1000 });
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
    const chunks = await chunkText(text, { ...AUTO_CHUNKING, maxChunks: 100 });
    expect(defined(chunks[0]).tokens).toBe(800);
    const overlap = defined(chunks[0]).text.slice(defined(chunks[0]).text.length - 200);
    expect(defined(chunks[1]).text).toContain(overlap);
  });

  it('keeps special-token text as text, across segments', async () => {
    const text = `${'plain words here '.repeat(6000)}<|endoftext|> the end`;
    const chunks = await chunkText(text, { maxTokens: 4096, overlapTokens: 0, maxChunks: 100 });
    expect(chunks.map((c) => c.text).join('')).toBe(text);
    expect(defined(chunks.at(-1)).text).toContain('<|endoftext|> the end');
  });

  it('refuses a text that needs more chunks than allowed', async () => {
    const text = 'word '.repeat(5000);
    await expect(chunkText(text, { maxTokens: 100, overlapTokens: 0, maxChunks: 10 })).rejects.toBeInstanceOf(
      TooManyChunks,
    );
  });

  it('stops between segments once its signal is aborted', async () => {
    const controller = new AbortController();
    controller.abort(new Error('no longer wanted'));
    await expect(
      chunkText('word '.repeat(20_000), {
        maxTokens: 100,
        overlapTokens: 0,
        maxChunks: 10_000,
        signal: controller.signal,
      }),
    ).rejects.toThrow('no longer wanted');
  });

  // The tokenizer's merging is quadratic in the length of one run without a break: runs are cut.
  const cjk = Array.from({ length: 3000 }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7919) % 20_000))).join('');
  const runs: [string, string][] = [
    ['CJK without a space', cjk],
    ['one letter repeated', 'b'.repeat(3000)],
    ['nested brackets', `${'['.repeat(1500)}${']'.repeat(1500)}`],
    ['emoji', '😀'.repeat(1500)],
    ['blanks', `a${' '.repeat(1000)}\n\t${' '.repeat(1000)}b`],
  ];

  const longestRun = (text: string) => Math.max(...(text.match(/\S+|\s+/g) ?? ['']).map((run) => run.length));

  it.each(runs)(
    'tokenizes %s in pieces without a run of more than MAX_RUN_CHARS, never between a surrogate pair',
    (_, text) => {
      expect(longestRun(text)).toBeGreaterThan(MAX_RUN_CHARS);
      let end = 0;
      for (const [start, stop] of pieces(text, 0, text.length)) {
        expect(start).toBe(end);
        expect(longestRun(text.slice(start, stop))).toBeLessThanOrEqual(MAX_RUN_CHARS);
        expect(stop).toBeGreaterThan(start);
        const code = text.charCodeAt(stop);
        expect(stop === text.length || code < 0xdc00 || code > 0xdfff).toBe(true);
        end = stop;
      }
      expect(end).toBe(text.length);
    },
  );

  it.each(runs)('chunks %s within the size, covering all of its text but blank stretches', async (_, text) => {
    const chunks = await chunkText(text, { maxTokens: 100, overlapTokens: 0, maxChunks: 10_000 });
    const covered = new Uint8Array(text.length);
    for (const chunk of chunks) {
      expect(chunk.tokens).toBeLessThanOrEqual(100);
      expect(tokens(chunk.text)).toBeLessThanOrEqual(100);
      expect(text.slice(chunk.start, chunk.start + chunk.text.length)).toBe(chunk.text);
      covered.fill(1, chunk.start, chunk.start + chunk.text.length);
    }
    for (let at = 0; at < text.length; at++) if (!/\s/.test(defined(text[at]))) expect(covered[at]).toBe(1);
  });

  it('keeps ordinary text in one piece per segment', () => {
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(500);
    expect([...pieces(text, 0, text.length)]).toEqual([[0, text.length]]);
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

const LIMITS: ExtractionLimits = { maxChars: 1_000_000, maxInflatedBytes: 8 * MIB, maxPages: 100 };
const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => error,
  );

describe('extract', () => {
  it.each([
    ['sample.html', 'html'],
    ['sample.docx', 'docx'],
  ] as const)('reads %s', async (name, format) => {
    expect(await extract(fixture(name), format, LIMITS)).toContain('PAPAYA-42');
  });

  it('reads the PDFs and DOCX files the tests make', async () => {
    expect(await extract(pdf({ pages: ['First page', 'Second page'] }), 'pdf', LIMITS)).toBe('First page\nSecond page');
    expect(await extract(docx(['One', 'Two <&>']), 'docx', LIMITS)).toContain('Two <&>');
  });

  it('refuses a PDF whose streams inflate past the bound before pdf.js inflates them, and names the bound', async () => {
    const bomb = pdf({ deflatedContent: await deflatedBlanks(16 * MIB), pages: ['After the bomb'] });
    expect(bomb.byteLength).toBeLessThan(64 * 1024);
    const error = await failure(extract(bomb, 'pdf', LIMITS));
    expect(error).toBeInstanceOf(ExtractionError);
    expect((error as ExtractionError).message).toBe(
      "The PDF's compressed parts inflate to more than 8388608 bytes (GATEWAY_INGEST_MAX_INFLATED_BYTES), the most a file may inflate to.",
    );
    // Under the bound, the same document is read.
    expect(await extract(bomb, 'pdf', { ...LIMITS, maxInflatedBytes: 32 * MIB })).toContain('After the bomb');
  });

  it('refuses a DOCX whose parts inflate past the bound before mammoth inflates them', async () => {
    const bomb = await docxBomb(16 * MIB);
    const error = await failure(extract(bomb, 'docx', LIMITS));
    expect((error as ExtractionError).message).toMatch(
      /^The DOCX file's compressed parts inflate to more than 8388608 bytes \(GATEWAY_INGEST_MAX_INFLATED_BYTES\)/,
    );
    expect(await extract(bomb, 'docx', { ...LIMITS, maxInflatedBytes: 32 * MIB })).toContain('bomb');
  });

  it('refuses a PDF with more pages than the bound, naming it', async () => {
    const error = await failure(extract(pdf({ pageCount: 101 }), 'pdf', LIMITS));
    expect((error as ExtractionError).message).toBe(
      'The PDF has 101 pages, more than 100 (GATEWAY_INGEST_MAX_PAGES), the most a file may index.',
    );
    expect(await extract(pdf({ pageCount: 100 }), 'pdf', LIMITS)).toContain('Page 100');
  });

  it('refuses HTML nested deeper than the parser can follow, saying so', async () => {
    const html = `${'<div>'.repeat(20_000)}deep${'</div>'.repeat(20_000)}`;
    const error = await failure(extract(new TextEncoder().encode(html), 'html', LIMITS));
    expect((error as ExtractionError).message).toBe(
      'The HTML file cannot be read: its elements are nested too deeply.',
    );
  });

  it('refuses a DOCX that is not a ZIP archive, or has too many parts', async () => {
    expect(((await failure(extract(fixture('corrupt.pdf'), 'docx', LIMITS))) as ExtractionError).message).toBe(
      'The DOCX file cannot be read: it is not a ZIP archive.',
    );
    const many = zip(Array.from({ length: 10_001 }, (_, i) => ({ name: `part${i}.xml`, content: '<a/>' })));
    expect(((await failure(extract(many, 'docx', LIMITS))) as ExtractionError).message).toBe(
      'The DOCX file cannot be read: it has more than 10000 parts.',
    );
  });
});

describe('inflation', () => {
  it('counts a stream up to its limit and one past it, bytes after its end left out', async () => {
    const data = await deflatedBlanks(4 * MIB);
    expect(inflatedSize(pako.Inflate, data, 'deflate', 8 * MIB)).toBe(4 * MIB);
    expect(inflatedSize(pako.Inflate, data, 'deflate', MIB)).toBe(MIB + 1);
    expect(inflatedSize(pako.Inflate, Buffer.concat([data, Buffer.from('\r\nnot deflate')]), 'deflate', 8 * MIB)).toBe(
      4 * MIB,
    );
    expect(inflatedSize(pako.Inflate, new Uint8Array([1, 2, 3]), 'deflate', MIB)).toBe(0);
  });

  it("counts a PDF's FlateDecode streams, not its images or unfiltered streams", async () => {
    const image = await deflatedBlanks(2 * MIB);
    const withImage = Buffer.concat([
      pdf({ pages: ['text'] }),
      Buffer.from(
        `9 0 obj\n<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /Filter /FlateDecode /Length ${image.length} >>\nstream\n`,
        'latin1',
      ),
      image,
      Buffer.from('\nendstream\nendobj\n', 'latin1'),
    ]);
    expect(await pdfInflatedBytes(withImage, 8 * MIB)).toBe(0);
    const content = 'BT /F1 12 Tf 72 720 Td (flate) Tj ET';
    expect(await pdfInflatedBytes(pdf({ deflatedContent: deflated(content) }), 8 * MIB)).toBe(content.length);
  });
});
