import { defined } from '../../support/defined';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { chunkerPool } from '../../../src/runtime/node/chunker-pool';
import { chunkDocument, type ChunkJob } from '../../../src/retrieval/chunker';
import { ExtractionError, type FileFormat } from '../../../src/retrieval/extract';
import { pdf } from '../../support/documents';
import { fixture } from '../../support/files';
import { chunkerProcessesOf } from '../../support/processes';
import { waitFor } from '../../support/wait';

/**
 * Node's chunker (runtime/node/chunker-pool.ts): documents read and chunked in processes of their own,
 * which are stopped past their CPU time or memory, or when the ingestion no longer wants the file.
 */

const MIB = 1024 * 1024;
const job = (format: FileFormat, overrides: Partial<ChunkJob> = {}): ChunkJob => ({
  format,
  maxBytes: 64 * MIB,
  limits: { maxChars: 10_000_000, maxInflatedBytes: 128 * MIB, maxPages: 100_000 },
  maxTokens: 200,
  overlapTokens: 50,
  maxChunks: 10_000,
  ...overrides,
});
const stream = (bytes: Uint8Array, pieceBytes = 64 * 1024) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let at = 0; at < bytes.byteLength; at += pieceBytes) controller.enqueue(bytes.slice(at, at + pieceBytes));
      controller.close();
    },
  });
const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: unknown) => error,
  );
const alive = () => new AbortController().signal;

describe('the chunker pool', () => {
  const pool = chunkerPool({ processes: 2, maxCpuMs: 60_000, maxMemoryMb: 512 });

  it.each([
    ['sample.html', 'html'],
    ['sample.docx', 'docx'],
    ['tiny.pdf', 'pdf'],
  ] as const)('chunks %s as chunkDocument does here, its bytes streamed in pieces', async (name, format) => {
    const bytes = fixture(name);
    const chunks = await pool.chunk(stream(bytes, 1000), job(format), alive());
    expect(chunks.length).toBeGreaterThan(0);
    expect(chunks).toEqual(await chunkDocument(bytes, job(format)));
  });

  it('chunks two documents at once, in two processes', async () => {
    const text = new TextEncoder().encode('word '.repeat(50_000));
    const [a, b] = await Promise.all([
      pool.chunk(stream(text), job('text'), alive()),
      pool.chunk(stream(text), job('text'), alive()),
    ]);
    expect(a).toEqual(b);
    expect(a.length).toBeGreaterThan(100);
  });

  it('refuses what it cannot read with the extraction’s reason, and goes on', async () => {
    const error = await failure(pool.chunk(stream(fixture('corrupt.pdf')), job('docx'), alive()));
    expect(error).toBeInstanceOf(ExtractionError);
    expect((error as ExtractionError).message).toBe('The DOCX file cannot be read: it is not a ZIP archive.');
    expect(defined((await pool.chunk(stream(fixture('sample.html')), job('html'), alive()))[0]).text).toContain(
      'Refund policy',
    );
  });

  it('refuses a document past its bytes, counted as they stream, whatever it claimed', async () => {
    const error = await failure(
      pool.chunk(stream(new Uint8Array(300_000).fill(0x61)), job('text', { maxBytes: 200_000 }), alive()),
    );
    expect((error as ExtractionError).message).toBe('The file is larger than 200000 bytes, the most a file may index.');
    expect((await pool.chunk(stream(fixture('sample.html')), job('html'), alive())).length).toBeGreaterThan(0);
  });

  it('stops the process working on a document as soon as the ingestion no longer wants the file', async () => {
    const single = chunkerPool({ processes: 1, maxCpuMs: 60_000, maxMemoryMb: 512 });
    const controller = new AbortController();
    // Seconds of CPU: the process is at work on it when it is stopped.
    const pages = pdf({ pageCount: 3000 });
    let handedOver!: () => void;
    const allSent = new Promise<void>((resolve) => (handedOver = resolve));
    const bytes = new ReadableStream<Uint8Array>({
      pull(controller_) {
        controller_.enqueue(pages);
        controller_.close();
        handedOver();
      },
    });
    const others = chunkerProcessesOf(process.pid);
    const chunking = failure(single.chunk(bytes, job('pdf'), controller.signal));
    await allSent;
    const started = (pids: number[]) => pids.filter((one) => !others.includes(one));
    const [pid] = started(
      await waitFor(
        () => chunkerProcessesOf(process.pid),
        (pids) => started(pids).length > 0,
      ),
    );
    // It runs below the server's priority, and holds none of the server's environment (its secrets).
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    expect(Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])).toBe(10);
    const environment = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean);
    expect(environment.map((entry) => entry.split('=')[0])).toEqual([
      'NODE_CHANNEL_FD',
      'NODE_CHANNEL_SERIALIZATION_MODE',
    ]);
    controller.abort(new Error('the file was deleted'));
    expect(await chunking).toEqual(new Error('the file was deleted'));
    expect(chunkerProcessesOf(process.pid)).not.toContain(pid);
    expect((await single.chunk(stream(fixture('tiny.pdf')), job('pdf'), alive())).length).toBeGreaterThan(0);
  });
});
