import { defined } from '../support/defined';
import { env, exports } from 'cloudflare:workers';
import { and, eq } from 'drizzle-orm';
import OpenAI from 'openai';
import { beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { createApp } from '../../src/app';
import { vectorStoreChunks, vectorStoreFiles, vectorStores } from '../../src/db/schema';
import { newId } from '../../src/lib/ids';
import { insertFile } from '../../src/resources/files/queries';
import { createWorkerDeps, workerDeps } from '../../src/runtime/workers/deps';
import { wakeForWaitingFiles } from '../../src/runtime/workers/ingest-queue';
import { insertDiedIngestion } from '../support/died-ingestion';
import { errorOf, json } from '../support/envelope';
import { parsePrometheusText, total } from '../support/prometheus';
import { fakeProviderKey, gatewayClient } from './gateway-client';

/**
 * Vector store ingestion on Workers, with both Workers in one workerd (vitest.config.ts): the
 * gateway under test sends a message on the ingestion queue when files are added; the ingest
 * Worker (its deployable bundle, wrangler.ingest.toml's bindings) consumes it, reads the file from
 * the shared R2 bucket, extracts, chunks, embeds with the fake provider (served from Node by
 * test/support/workers-global-setup.ts) through the gateway's rate-limit counter objects, and writes the chunks to
 * the test sqld. The client is the official SDK, in workerd, its fetch the gateway's own.
 */

const API_KEY = inject('workersTenant').workspaceKey;
const workspaceId = inject('workersTenant').workspace.id;

let openai: OpenAI;

function call(path: string, init: { method?: string; body?: unknown } = {}) {
  return exports.default.fetch(`http://gateway${path}`, {
    method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
    headers: { 'x-gateway-api-key': API_KEY, 'content-type': 'application/json' },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
}

/** A file as the Files API stores it: its bytes in the bucket (the gateway's blob store), its row in the database. */
async function storeFile(filename: string, content: string | Uint8Array, workspace = workspaceId): Promise<string> {
  const deps = await workerDeps(env);
  const id = newId('file');
  const bytes = typeof content === 'string' ? new TextEncoder().encode(content) : content;
  const blobKey = `test/${id}`;
  await deps.blobs.put(blobKey, new Blob([bytes]).stream(), { maxBytes: bytes.byteLength + 1 });
  await insertFile(deps.db, {
    id,
    workspaceId: workspace,
    purpose: 'assistants',
    filename,
    bytes: bytes.byteLength,
    contentType: null,
    blobKey,
    createdAt: Date.now(),
    expiresAt: null,
  });
  return id;
}

beforeAll(async () => {
  const slug = `embed-${crypto.randomUUID().slice(0, 8)}`;
  await fakeProviderKey(API_KEY, slug);
  openai = gatewayClient({ 'x-gateway-api-key': API_KEY, 'x-gateway-virtual-key': slug });
});

const PARAGRAPHS = Array.from(
  { length: 40 },
  (_, i) =>
    `Paragraph ${i}: the lighthouse keeper logs the tide, the wind and the ships that pass the northern reef at dawn.`,
);

describe('ingestion on Workers', () => {
  it('a text file added to a store is ingested by the ingest Worker: completed, its chunks written with their vectors', async () => {
    const fileId = await storeFile('lighthouse.txt', PARAGRAPHS.join('\n\n'));
    const store = await openai.vectorStores.create({ name: 'workers ingestion' });

    const file = await openai.vectorStores.files.createAndPoll(
      store.id,
      {
        file_id: fileId,
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 50 } },
      },
      { pollIntervalMs: 100 },
    );
    expect(file).toMatchObject({ id: fileId, status: 'completed', last_error: null });
    expect(file.usage_bytes).toBeGreaterThan(0);

    const { db } = await workerDeps(env);
    const [row] = await db.select().from(vectorStores).where(eq(vectorStores.id, store.id));
    const dimensions = defined(defined(row).embeddingDimensions);
    expect(dimensions).toBeGreaterThan(0);
    const chunks = await db
      .select()
      .from(vectorStoreChunks)
      .where(and(eq(vectorStoreChunks.vectorStoreId, store.id), eq(vectorStoreChunks.fileId, fileId)))
      .orderBy(vectorStoreChunks.chunkIndex);
    // About 1,000 tokens in chunks of 200 with 50 of overlap.
    expect(chunks.length).toBeGreaterThan(4);
    expect(chunks.map((chunk) => chunk.chunkIndex)).toEqual(chunks.map((_, index) => index));
    expect(defined(chunks[0]).text.startsWith('Paragraph 0:')).toBe(true);
    expect(defined(chunks.at(-1)).text).toContain('Paragraph 39:');
    for (const chunk of chunks) {
      expect(chunk.tokens).toBeLessThanOrEqual(200);
      // The fake provider's vectors: `dimensions` float32s of unit length.
      const vector = new Float32Array(new Uint8Array(chunk.embedding).buffer);
      expect(vector.length).toBe(dimensions);
      expect(Math.hypot(...vector)).toBeCloseTo(1, 3);
    }

    const content = await json(await call(`/v1/vector_stores/${store.id}/files/${fileId}/content`));
    expect(content.data.map((part: { text: string }) => part.text)).toEqual(chunks.map((chunk) => chunk.text));
    expect((await openai.vectorStores.retrieve(store.id)).file_counts).toEqual({
      in_progress: 0,
      completed: 1,
      failed: 0,
      cancelled: 0,
      total: 1,
    });
  });

  it('a file created with its store, and one that cannot be read, end completed and failed', async () => {
    const good = await storeFile('notes.md', '# Notes\n\nThe ferry leaves at nine and returns at six.');
    const bad = await storeFile('binary.txt', new Uint8Array([0xff, 0xfe, 0x00, 0xc3, 0x28]));
    const store = await openai.vectorStores.create({ name: 'created with files', file_ids: [good, bad] });
    expect(store.file_counts).toMatchObject({ in_progress: 2, total: 2 });

    const [first, second] = await Promise.all(
      [good, bad].map((id) => openai.vectorStores.files.poll(store.id, id, { pollIntervalMs: 100 })),
    );
    expect(first).toMatchObject({ status: 'completed', last_error: null });
    expect(second).toMatchObject({
      status: 'failed',
      last_error: { code: 'invalid_file', message: 'The file is not valid UTF-8 text.' },
    });
  });

  it('refuses a PDF bomb before inflating it, naming the bound, and chunks text without a space', async () => {
    const bomb = await storeFile(
      'bomb.pdf',
      Uint8Array.from(atob(inject('pdfBomb')), (char) => char.charCodeAt(0)),
    );
    // 40,000 CJK characters without a space: one call of the tokenizer took seconds on them.
    const cjk = await storeFile(
      'cjk.txt',
      Array.from({ length: 40_000 }, (_, i) => String.fromCharCode(0x4e00 + ((i * 7919) % 20_000))).join(''),
    );
    const store = await openai.vectorStores.create({ name: 'hostile documents', file_ids: [bomb, cjk] });
    const [refused, chunked] = await Promise.all(
      [bomb, cjk].map((id) => openai.vectorStores.files.poll(store.id, id, { pollIntervalMs: 100 })),
    );
    expect(refused).toMatchObject({
      status: 'failed',
      last_error: {
        code: 'invalid_file',
        message:
          "The PDF's compressed parts inflate to more than 134217728 bytes (GATEWAY_INGEST_MAX_INFLATED_BYTES), the most a file may inflate to.",
      },
    });
    expect(chunked).toMatchObject({ status: 'completed', last_error: null });
  });

  it("the ingest Worker's cron takes up a file whose ingestion died (its lease ran out)", async () => {
    const { db } = await workerDeps(env);
    const fileId = await storeFile('orphan.txt', 'The harbour master rings the bell at noon.');
    const store = await openai.vectorStores.create({ name: 'crashed ingestion' });
    await insertDiedIngestion(db, { vectorStoreId: store.id, fileId, workspaceId });
    const queue = env.INGEST_QUEUE;
    if (!queue) throw new Error('wrangler.toml declares INGEST_QUEUE');
    // What the ingest Worker's scheduled handler does, here on the same queue and database (its
    // module, with the extraction libraries, is not loaded into the test's isolate): the message
    // reaches the ingest Worker beside.
    expect(await wakeForWaitingFiles({ db, now: Date.now }, queue)).toBe(true);

    const file = await openai.vectorStores.files.poll(store.id, fileId, { pollIntervalMs: 100 });
    expect(file).toMatchObject({ status: 'completed', last_error: null });
    const [row] = await db.select().from(vectorStoreFiles).where(eq(vectorStoreFiles.fileId, fileId));
    expect(defined(row).attempts).toBe(2);
  });

  it("counts embedding calls in the gateway's rate-limit counter objects", async () => {
    // In the second workspace, whose policies no other test lists: a policy of one request a day
    // for a virtual key of this test's own, taken by a run created on the gateway. The counter is
    // a Durable Object of the gateway Worker; had the ingest Worker counted anywhere else, its
    // embedding call would find room and the file would complete.
    const tenant = inject('workersTenant');
    const slug = `counted-${crypto.randomUUID().slice(0, 8)}`;
    const headers = {
      'x-gateway-api-key': tenant.runsWorkspaceKey,
      'x-gateway-virtual-key': slug,
      'content-type': 'application/json',
    };
    const post = (path: string, body: unknown) =>
      exports.default.fetch(`http://gateway${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    const key = await json(
      await post('/v1/virtual-keys', { slug, provider: 'openai', base_url: inject('upstreamUrl'), api_key: 'sk-fake' }),
    );
    expect(key).toMatchObject({ object: 'virtual_key', slug });
    const policy = {
      type: 'requests',
      unit: 'rpd',
      value: 1,
      conditions: [{ key: 'virtual_key', value: slug }],
      group_by: [{ key: 'workspace_id' }],
    };
    expect((await post('/v1/policies/rate-limits', policy)).status).toBe(200);
    const assistant = await json(await post('/v1/assistants', { model: 'fake-model' }));
    expect(
      (
        await post('/v1/threads/runs', {
          assistant_id: assistant.id,
          thread: { messages: [{ role: 'user', content: 'Hi' }] },
        })
      ).status,
    ).toBe(200);

    const fileId = await storeFile('counted.txt', 'The lamp is lit at dusk.', key.workspace_id);
    const store = await json(await post('/v1/vector_stores', { name: 'counted', file_ids: [fileId] }));
    expect(store.file_counts).toMatchObject({ in_progress: 1 });
    // Put back until the window resets, as a refusal by the workspace's own policies does: still
    // in progress, the attempt not counted, claimable again only later.
    const { db } = await workerDeps(env);
    const deferred = async () => {
      for (;;) {
        const [row] = await db.select().from(vectorStoreFiles).where(eq(vectorStoreFiles.fileId, fileId));
        if (
          defined(row).status !== 'in_progress' ||
          (defined(row).attempts === 0 && defined(row).leaseExpiresAt !== null)
        )
          return defined(row);
        await scheduler.wait(100);
      }
    };
    const row = await deferred();
    expect(row).toMatchObject({ status: 'in_progress', attempts: 0, lastError: null });
    expect(row.leaseExpiresAt).toBeGreaterThan(Date.now());
  });

  it("hands its embedding tokens to the gateway's metrics aggregate, as GET /metrics shows them", async () => {
    // A store of its own embeddings model, so that only this ingestion counts under it.
    const model = `embed-metrics-${crypto.randomUUID().slice(0, 8)}`;
    const store = await openai.vectorStores.create({ name: 'metrics' });
    const { db } = await workerDeps(env);
    await db.update(vectorStores).set({ embeddingModel: model }).where(eq(vectorStores.id, store.id));
    const fileId = await storeFile('metered.txt', PARAGRAPHS.slice(0, 5).join('\n\n'));
    const file = await openai.vectorStores.files.createAndPoll(store.id, { file_id: fileId }, { pollIntervalMs: 100 });
    expect(file).toMatchObject({ status: 'completed' });

    const usage = await json(await call('/v1/usage?group_by=model,kind&bucket_width=1d'));
    const results = (usage.data as { results: { model: string; input_tokens: number }[] }[]).flatMap(
      (bucket) => bucket.results,
    );
    const embedded = defined(results.find((result) => result.model === model)).input_tokens;
    expect(embedded).toBeGreaterThan(0);
    // The ingest Worker hands off after each file; the scrape adds up every isolate's.
    const orgKey = inject('workersTenant').orgKey;
    await vi.waitFor(
      async () => {
        const scraped = await exports.default.fetch('http://gateway/metrics', {
          headers: { authorization: `Bearer ${orgKey}` },
        });
        const families = parsePrometheusText(await scraped.text());
        expect(total(families, 'gateway_tokens_total', { kind: 'embeddings', model, type: 'prompt' })).toBe(embedded);
      },
      { timeout: 20_000, interval: 200 },
    );
  });

  it('without the queue binding, adding files is refused and nothing is written', async () => {
    const app = createApp(await createWorkerDeps({ ...env, INGEST_QUEUE: undefined }));
    const fileId = await storeFile('unqueued.txt', 'never ingested');
    const headers = { 'x-gateway-api-key': API_KEY, 'content-type': 'application/json' };
    const store = await openai.vectorStores.create({ name: 'no queue' });
    const refused = await app.request(`/v1/vector_stores/${store.id}/files`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ file_id: fileId }),
    });
    expect(await errorOf(refused)).toMatchObject({ status: 400, code: 'ingestion_unavailable', param: 'file_id' });
    expect((await openai.vectorStores.files.list(store.id)).data).toEqual([]);
  });
});
