import { defined } from '../support/defined';
import { readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deflatedBlanks, docxBomb, pdf } from '../support/documents';
import { chunkerProcessesOf } from '../support/processes';
import {
  atRest,
  closeArena,
  openArena,
  percentile,
  postJson,
  sleep,
  waitFor,
  whileMeasured,
  type Arena,
  type Target,
  type Watch,
} from './support';

/**
 * A tenant's files as an attacker writes them, added to vector stores of a gateway process with its
 * default bounds (issue 34's F1 to F3, F6, F7): text without a space or with one run of a character
 * (CJK, `b` x 32,000, JSON nested 50,000 deep, HTML of a million `&amp;`), PDF and DOCX bombs, PDFs
 * of thousands of pages, HTML nested 100,000 deep, and an embeddings provider that never answers.
 *
 * While each is ingested, whileMeasured (support.ts) polls /health (p99 under STALL_MS, no stall),
 * watches the gateway's memory (peak growth under MAX_RSS_GROWTH_MB: documents are read in chunker
 * processes of their own, whose own peak is reported beside it) and runs another tenant's streamed
 * runs back to back, whose median time must stay within SLOWDOWN of what it was at rest. Text ends
 * `completed`; every bomb ends `failed` with a message naming the bound it passed.
 */

const MIB = 1024 * 1024;
const MAX_RSS_GROWTH_MB = 64;
/** The other tenant's median run time during a case, over its median at rest: at most this. */
const SLOWDOWN = 2;
const ENV = { LOG_LEVEL: 'warn', GATEWAY_ALLOW_PRIVATE_UPSTREAMS: 'true' };

let arena: Arena;
/** A server that takes connections and never answers: the attacker's embeddings provider in F6. */
let silent: Server;
const held: Socket[] = [];
let attacker: Target;
let other: Target;
let watch: Watch;
let baselineRunMs: number;
const tally = { gatewayStalls: 0, outOfMemoryDeaths: 0, answered5xx: 0, inputsTried: 0 };
const figures: Record<string, number> = {};

beforeAll(async () => {
  silent = createServer((socket) => held.push(socket.on('error', () => undefined)));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  const address = silent.address();
  if (address === null || typeof address === 'string') throw new Error('the silent server has no port');
  arena = await openArena('ingestion', ENV, tally);
  ({ attacker, other } = arena);
  await post(attacker, '/v1/virtual-keys', {
    slug: 'embed',
    provider: 'openai',
    base_url: arena.fake.baseURL,
    api_key: 'sk-embed',
    default: true,
  });
  await post(attacker, '/v1/virtual-keys', {
    slug: 'silent',
    provider: 'openai',
    base_url: `http://127.0.0.1:${address.port}/v1`,
    api_key: 'sk-silent',
  });
  ({ watch, baselineMs: baselineRunMs } = await atRest(arena, tally, figures));
});

afterAll(async () => {
  await closeArena(arena, 'ingestion', tally, figures);
  for (const socket of held) socket.destroy();
  silent?.close();
});

const post = <T = { id: string }>(target: Pick<Target, 'url' | 'headers'>, path: string, body: unknown) =>
  postJson<T>(target, path, body, tally);

/** A file uploaded through POST /v1/files as the SDKs send one, by the attacker unless told. */
async function upload(filename: string, content: Uint8Array | string, target: Target = attacker): Promise<string> {
  const form = new FormData();
  form.append('purpose', 'assistants');
  form.append('file', new Blob([content]), filename);
  const response = await fetch(`${target.url}/v1/files`, {
    method: 'POST',
    headers: { 'x-gateway-api-key': target.workspaceKey },
    body: form,
  });
  if (response.status >= 500) tally.answered5xx++;
  expect(response.status).toBe(200);
  tally.inputsTried++;
  return ((await response.json()) as { id: string }).id;
}

interface StoreFile {
  id: string;
  status: string;
  last_error: { code: string; message: string } | null;
}

/** A store of the attacker's with `fileIds`, each followed to its end (`timeoutMs` at most). */
async function ingested(
  fileIds: string[],
  timeoutMs = 120_000,
  virtualKey = 'embed',
): Promise<{ storeId: string; files: StoreFile[] }> {
  const headers = { ...attacker.headers, 'x-gateway-virtual-key': virtualKey };
  const store = await post({ url: attacker.url, headers }, '/v1/vector_stores', { name: 'hostile', file_ids: fileIds });
  const files = await waitFor(
    async () => {
      const response = await fetch(`${attacker.url}/v1/vector_stores/${store.id}/files?limit=100`, { headers });
      if (response.status >= 500) tally.answered5xx++;
      return ((await response.json()) as { data: StoreFile[] }).data;
    },
    (current) => current.length === fileIds.length && current.every((file) => file.status !== 'in_progress'),
    timeoutMs,
  );
  return { storeId: store.id, files: fileIds.map((id) => defined(files.find((file) => file.id === id))) };
}

/**
 * `work` measured (whileMeasured), with the peak resident memory of the gateway's chunker
 * processes meanwhile, and the other tenant's median run time checked against its baseline.
 */
async function measured<T>(name: string, work: () => Promise<T>): Promise<T> {
  let done = false;
  let chunkerPeakMb = 0;
  const sampler = (async () => {
    while (!done) {
      for (const pid of chunkerProcessesOf(defined(arena.gateway.child.pid))) {
        try {
          chunkerPeakMb = Math.max(
            chunkerPeakMb,
            Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024,
          );
        } catch {
          // Exited meanwhile.
        }
      }
      await sleep(50);
    }
  })();
  try {
    const { result, healthy } = await whileMeasured(watch, name, work, MAX_RSS_GROWTH_MB);
    const during = percentile(
      healthy.map((run) => run.ms),
      0.5,
    );
    figures[`${name}_bystander_run_p50_ms`] = Math.round(during);
    figures[`${name}_chunker_peak_rss_mb`] = Math.round(chunkerPeakMb);
    console.log(
      `${name}: the other tenant's runs p50 ${during.toFixed(0)} ms (before ${baselineRunMs.toFixed(0)} ms); chunker processes' peak RSS ${chunkerPeakMb.toFixed(0)} MB`,
    );
    expect(during).toBeLessThan(baselineRunMs * SLOWDOWN);
    return result;
  } finally {
    done = true;
    await sampler;
  }
}

const cjk = (chars: number) =>
  Array.from({ length: chars }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7919) % 20_000))).join('');

describe('hostile documents, one kind at a time', () => {
  it('F1: text without a space or with one character repeated is chunked in linear time, and completes', async () => {
    const texts: [string, string][] = [
      ['cjk-96k.txt', cjk(32_000)],
      ['cjk-480k.txt', cjk(160_000)],
      ['b.txt', 'b'.repeat(32_000)],
      ['nested.json', `${'['.repeat(50_000)}${']'.repeat(50_000)}`],
      ['amp.html', `<p>${'&amp;'.repeat(1_000_000)}</p>`],
    ];
    const ids = await Promise.all(texts.map(([name, content]) => upload(name, content)));
    const { files } = await measured('f1_unbroken_text', () => ingested(ids));
    for (const file of files) expect(file).toMatchObject({ status: 'completed', last_error: null });
  });

  it('F2 and F7: PDFs whose stream inflates to 256 MiB and 1 GiB, and a DOCX whose document inflates to 1 GiB, fail naming the bound', async () => {
    const ids = await Promise.all([
      upload('bomb-256m.pdf', pdf({ deflatedContent: await deflatedBlanks(256 * MIB) })),
      upload('bomb-1g.pdf', pdf({ deflatedContent: await deflatedBlanks(1024 * MIB) })),
      upload('bomb-1g.docx', await docxBomb(1024 * MIB)),
    ]);
    const { files } = await measured('f2_f7_bombs', () => ingested(ids));
    const bound =
      'inflate to more than 134217728 bytes (GATEWAY_INGEST_MAX_INFLATED_BYTES), the most a file may inflate to.';
    expect(files.map((file) => file.last_error?.message)).toEqual([
      `The PDF's compressed parts ${bound}`,
      `The PDF's compressed parts ${bound}`,
      `The DOCX file's compressed parts ${bound}`,
    ]);
  });

  it('F3 and nesting: a PDF of 20,000 pages and HTML nested 100,000 deep fail naming why; one of 3,000 pages completes', async () => {
    const ids = await Promise.all([
      upload('pages-20000.pdf', pdf({ pageCount: 20_000 })),
      upload('nested.html', `${'<div>'.repeat(100_000)}deep${'</div>'.repeat(100_000)}`),
      upload('pages-3000.pdf', pdf({ pageCount: 3_000 })),
    ]);
    const { files } = await measured('f3_pages_nesting', () => ingested(ids));
    expect(files.map((file) => [file.status, file.last_error?.message ?? null])).toEqual([
      ['failed', 'The PDF has 20000 pages, more than 5000 (GATEWAY_INGEST_MAX_PAGES), the most a file may index.'],
      ['failed', 'The HTML file cannot be read: its elements are nested too deeply.'],
      ['completed', null],
    ]);
  });

  it('F6: a workspace whose embeddings provider never answers holds one slot; another workspace’s file is ingested meanwhile', async () => {
    const stuckIds = await Promise.all([
      upload('stuck-1.txt', 'never embedded one'),
      upload('stuck-2.txt', 'never embedded two'),
    ]);
    const stuck = ingested(stuckIds, 180_000, 'silent');
    await waitFor(
      () => held.length,
      (count) => count > 0,
      20_000,
    );
    const started = performance.now();
    const ownHeaders = other.headers;
    const { storeId, fileIds, seconds } = await measured('f6_stuck_embeddings', async () => {
      const fileId = await upload('line.txt', 'a line of the other tenant', other);
      const store = await post({ url: other.url, headers: ownHeaders }, '/v1/vector_stores', {
        name: 'bystander',
        file_ids: [fileId],
      });
      const file = await waitFor(
        async () =>
          (await (
            await fetch(`${other.url}/v1/vector_stores/${store.id}/files/${fileId}`, { headers: ownHeaders })
          ).json()) as StoreFile,
        (current) => current.status !== 'in_progress',
        60_000,
      );
      expect(file.status).toBe('completed');
      return { storeId: store.id, fileIds: [fileId], seconds: (performance.now() - started) / 1000 };
    });
    figures.f6_other_file_seconds = Math.round(seconds * 10) / 10;
    expect(storeId).toBeTruthy();
    expect(fileIds).toHaveLength(1);
    // The stuck provider's first file fails within the embeddings deadline (60 s), not four times it.
    const { files } = await stuck;
    expect(files.map((file) => file.status)).toEqual(['failed', 'failed']);
    for (const file of files)
      expect(file.last_error?.message).toBe(
        'The embeddings provider failed: The embeddings upstream did not answer in time.',
      );
  }, 240_000);
});
