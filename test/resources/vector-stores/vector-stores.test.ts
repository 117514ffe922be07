import { defined } from '../../support/defined';
import { and, eq } from 'drizzle-orm';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { vectorStoreChunks, vectorStores } from '../../../src/db/schema';
import { createFakeUpstream, FAKE_EMBEDDINGS_STATUS } from '../../support/fake-upstream';
import { fixture, storeFile } from '../../support/files';
import { errorOf, gatewayWithDefaultKey, json, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * /v1/vector_stores with the official SDK, over the real app and libSQL, the fake provider's
 * /v1/embeddings embedding: stores, their files and batches, ingestion of each format, failures.
 */

const upstream = createFakeUpstream();
let gateway: TestGateway;
let tenant: Tenant;
let client: OpenAI;

beforeAll(async () => {
  ({ gateway, tenant, client } = await gatewayWithDefaultKey(upstream.fetch));
});
afterAll(() => gateway?.close());

const chunksOf = (storeId: string, fileId: string) =>
  gateway.database.db
    .select()
    .from(vectorStoreChunks)
    .where(and(eq(vectorStoreChunks.vectorStoreId, storeId), eq(vectorStoreChunks.fileId, fileId)))
    .orderBy(vectorStoreChunks.chunkIndex);

const text = (filename: string, content: string) => storeFile(gateway, tenant, { filename, content });

describe('vector stores', () => {
  it('creates, retrieves, lists, updates and deletes a store', async () => {
    const store = await client.vectorStores.create({
      name: 'docs',
      metadata: { team: 'a' },
      expires_after: { anchor: 'last_active_at', days: 7 },
    });
    expect(store).toMatchObject({
      object: 'vector_store',
      name: 'docs',
      status: 'completed',
      usage_bytes: 0,
      file_counts: { in_progress: 0, completed: 0, failed: 0, cancelled: 0, total: 0 },
      expires_after: { anchor: 'last_active_at', days: 7 },
      metadata: { team: 'a' },
    });
    expect(store.id).toMatch(/^vs_/);
    expect(store.expires_at).toBe(defined(store.last_active_at) + 7 * 86_400);
    const [row] = await gateway.database.db.select().from(vectorStores).where(eq(vectorStores.id, store.id));
    expect(row).toMatchObject({ embeddingModel: 'text-embedding-3-small', embeddingDimensions: null });
    expect(defined(row).virtualKeyId).toBeTruthy();

    expect(await client.vectorStores.retrieve(store.id)).toEqual(store);
    const updated = await client.vectorStores.update(store.id, {
      name: 'renamed',
      expires_after: null,
      metadata: { team: 'b' },
    });
    expect(updated).toMatchObject({ name: 'renamed', expires_at: null, metadata: { team: 'b' } });
    expect(updated.expires_after).toBeUndefined();

    const second = await client.vectorStores.create({ name: 'second' });
    const page = await client.vectorStores.list({ limit: 1 });
    expect(page.data.map((s) => s.id)).toEqual([second.id]);
    expect(page.has_more).toBe(true);
    const next = await client.vectorStores.list({ limit: 1, after: second.id });
    expect(next.data.map((s) => s.id)).toEqual([store.id]);
    const ascending = await client.vectorStores.list({ order: 'asc' });
    expect(ascending.data.map((s) => s.id)).toEqual([store.id, second.id]);

    expect(await client.vectorStores.delete(store.id)).toEqual({
      id: store.id,
      object: 'vector_store.deleted',
      deleted: true,
    });
    const gone = await errorOf(await gateway.request(`/v1/vector_stores/${store.id}`, { key: tenant.workspaceKey }));
    expect(gone).toMatchObject({ status: 404, code: 'vector_store_not_found' });
  });

  it('ingests the files it is created with, in the background, and counts them', async () => {
    const a = await text('notes.md', '# Notes\n\nThe magic word is **PAPAYA-42**.\n');
    const b = await text('data.json', '{"word":"MANGO-7"}');
    const store = await client.vectorStores.create({ name: 'with files', file_ids: [a, b] });
    expect(store.file_counts).toEqual({ in_progress: 2, completed: 0, failed: 0, cancelled: 0, total: 2 });
    expect(store.status).toBe('in_progress');
    await gateway.tasks.drain(20_000);
    const done = await client.vectorStores.retrieve(store.id);
    expect(done.status).toBe('completed');
    expect(done.file_counts).toEqual({ in_progress: 0, completed: 2, failed: 0, cancelled: 0, total: 2 });
    expect(done.usage_bytes).toBeGreaterThan(0);
    // The list's figures, read with each store, are the store's.
    const listed = (await client.vectorStores.list()).data.find((candidate) => candidate.id === store.id);
    expect(listed).toEqual(done);
    const chunks = await chunksOf(store.id, a);
    expect(chunks.map((c) => c.text).join('')).toContain('PAPAYA-42');
    expect(defined(chunks[0]).embedding.byteLength).toBe(512 * 4);
    const [row] = await gateway.database.db.select().from(vectorStores).where(eq(vectorStores.id, store.id));
    expect(defined(row).embeddingDimensions).toBe(512);
  });

  it('refuses unknown files, naming the field, and writes nothing', async () => {
    const other = await gateway.tenant();
    const theirs = await storeFile(gateway, other, { filename: 'x.txt', content: 'theirs' });
    const mine = await text('y.txt', 'mine');
    const before = await gateway.database.db
      .select()
      .from(vectorStores)
      .where(eq(vectorStores.workspaceId, tenant.workspace.id));
    const error = await errorOf(
      await gateway.request('/v1/vector_stores', { key: tenant.workspaceKey, body: { file_ids: [mine, theirs] } }),
    );
    expect(error).toMatchObject({ status: 404, code: 'file_not_found', param: 'file_ids[1]' });
    const after = await gateway.database.db
      .select()
      .from(vectorStores)
      .where(eq(vectorStores.workspaceId, tenant.workspace.id));
    expect(after.length).toBe(before.length);
  });

  it('validates chunking strategies and expiry', async () => {
    const bad = async (body: object) =>
      errorOf(await gateway.request('/v1/vector_stores', { key: tenant.workspaceKey, body }));
    expect(
      await bad({
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 99, chunk_overlap_tokens: 0 } },
      }),
    ).toMatchObject({
      status: 400,
      param: 'chunking_strategy.static.max_chunk_size_tokens',
    });
    expect(
      await bad({
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 101 } },
      }),
    ).toMatchObject({
      status: 400,
      param: 'chunking_strategy.static.chunk_overlap_tokens',
    });
    expect(await bad({ expires_after: { anchor: 'created_at', days: 1 } })).toMatchObject({
      status: 400,
      param: 'expires_after.anchor',
    });
    expect(await bad({ expires_after: { anchor: 'last_active_at', days: 366 } })).toMatchObject({
      status: 400,
      param: 'expires_after.days',
    });
  });
});

describe('vector store files', () => {
  it('adds a file with attributes and static chunking, polls it to completed, pages its content, updates and deletes it', async () => {
    const store = await client.vectorStores.create({ name: 'files' });
    const words = Array.from({ length: 600 }, (_, i) => `word${i}`).join(' ');
    const fileId = await text('long.txt', words);
    const file = await client.vectorStores.files.createAndPoll(
      store.id,
      {
        file_id: fileId,
        attributes: { author: 'ann', year: 2024, draft: false },
        chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 50 } },
      },
      { pollIntervalMs: 20 },
    );
    expect(file).toMatchObject({
      id: fileId,
      object: 'vector_store.file',
      vector_store_id: store.id,
      status: 'completed',
      last_error: null,
      attributes: { author: 'ann', year: 2024, draft: false },
      chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 200, chunk_overlap_tokens: 50 } },
    });
    expect(file.usage_bytes).toBeGreaterThan(0);
    const chunks = await chunksOf(store.id, fileId);
    expect(chunks.length).toBeGreaterThan(3);
    for (const chunk of chunks) expect(chunk.tokens).toBeLessThanOrEqual(200);

    const content = await json(
      await gateway.request(`/v1/vector_stores/${store.id}/files/${fileId}/content`, { key: tenant.workspaceKey }),
    );
    expect(content).toMatchObject({ object: 'vector_store.file_content.page', has_more: false, next_page: null });
    expect(content.data.map((part: { text: string }) => part.text)).toEqual(chunks.map((c) => c.text));
    const sdkContent = [];
    for await (const part of client.vectorStores.files.content(fileId, { vector_store_id: store.id }))
      sdkContent.push(part);
    expect(sdkContent.length).toBe(chunks.length);

    const updated = await client.vectorStores.files.update(fileId, {
      vector_store_id: store.id,
      attributes: { author: 'bob' },
    });
    expect(updated.attributes).toEqual({ author: 'bob' });
    const listed = await client.vectorStores.files.list(store.id, { filter: 'completed' });
    expect(listed.data.map((f) => f.id)).toEqual([fileId]);
    expect((await client.vectorStores.files.list(store.id, { filter: 'failed' })).data).toEqual([]);

    expect(await client.vectorStores.files.delete(fileId, { vector_store_id: store.id })).toEqual({
      id: fileId,
      object: 'vector_store.file.deleted',
      deleted: true,
    });
    expect(await chunksOf(store.id, fileId)).toEqual([]);
    const gone = await errorOf(
      await gateway.request(`/v1/vector_stores/${store.id}/files/${fileId}`, { key: tenant.workspaceKey }),
    );
    expect(gone).toMatchObject({ status: 404, code: 'vector_store_file_not_found' });
  });

  it.each([
    ['tiny.pdf', 'application/pdf', 'PAPAYA-42'],
    ['sample.docx', null, 'PAPAYA-42'],
    ['sample.html', 'text/html', 'Refund policy'],
  ])('extracts the text of %s', async (name, contentType, phrase) => {
    const store = await client.vectorStores.create({ name });
    const fileId = await storeFile(gateway, tenant, {
      filename: name,
      content: fixture(name),
      contentType: contentType ?? undefined,
    });
    const file = await client.vectorStores.files.createAndPoll(store.id, { file_id: fileId }, { pollIntervalMs: 20 });
    expect(file.last_error).toBeNull();
    expect(file.status).toBe('completed');
    const all = (await chunksOf(store.id, fileId)).map((c) => c.text).join('\n');
    expect(all).toContain(phrase);
    if (name === 'sample.html') expect(all).not.toContain('must not appear');
  });

  it.each([
    ['corrupt.pdf', 'invalid_file', 'The PDF cannot be read'],
    ['no-text.pdf', 'invalid_file', 'no text layer'],
    ['picture.png', 'unsupported_file', 'cannot be indexed'],
    ['binary.txt', 'invalid_file', 'not valid UTF-8'],
  ])('fails %s with last_error %s, leaving no chunks', async (name, code, message) => {
    const store = await client.vectorStores.create({ name });
    const content =
      name === 'picture.png' || name === 'binary.txt'
        ? new Uint8Array([0x89, 0x50, 0xff, 0xfe, 0x00, 0xc3])
        : fixture(name);
    const fileId = await storeFile(gateway, tenant, { filename: name, content });
    const file = await client.vectorStores.files.createAndPoll(store.id, { file_id: fileId }, { pollIntervalMs: 20 });
    expect(file.status).toBe('failed');
    expect(file.last_error).toMatchObject({ code });
    expect(defined(file.last_error).message).toContain(message);
    expect(await chunksOf(store.id, fileId)).toEqual([]);
    const after = await client.vectorStores.retrieve(store.id);
    expect(after.file_counts).toMatchObject({ failed: 1, total: 1 });
    expect(after.status).toBe('completed');
  });

  it('fails a file whose embeddings the provider refuses, with the provider’s reason and no chunks', async () => {
    const store = await client.vectorStores.create({ name: 'refused' });
    const fileId = await text('refused.txt', `Some text, then ${FAKE_EMBEDDINGS_STATUS} 400 for the fake.`);
    const file = await client.vectorStores.files.createAndPoll(store.id, { file_id: fileId }, { pollIntervalMs: 20 });
    expect(file.status).toBe('failed');
    expect(file.last_error).toMatchObject({ code: 'server_error' });
    expect(defined(file.last_error).message).toContain('embeddings provider failed');
    expect(await chunksOf(store.id, fileId)).toEqual([]);
  });

  it('refuses a file of another workspace and a store of another workspace', async () => {
    const other = await gateway.tenant();
    const theirFile = await storeFile(gateway, other, { filename: 'x.txt', content: 'theirs' });
    const store = await client.vectorStores.create({ name: 'mine' });
    const error = await errorOf(
      await gateway.request(`/v1/vector_stores/${store.id}/files`, {
        key: tenant.workspaceKey,
        body: { file_id: theirFile },
      }),
    );
    expect(error).toMatchObject({ status: 404, code: 'file_not_found', param: 'file_id' });
    const mine = await text('mine.txt', 'mine');
    const theirKey = await gateway.virtualKey(other, { base_url: 'http://fake.test/v1', default: true });
    expect(theirKey).toBeTruthy();
    const elsewhere = await errorOf(
      await gateway.request(`/v1/vector_stores/${store.id}/files`, {
        key: other.workspaceKey,
        body: { file_id: mine },
      }),
    );
    expect(elsewhere).toMatchObject({ status: 404, code: 'vector_store_not_found' });
    expect((await client.vectorStores.files.list(store.id)).data).toEqual([]);
  });
});

describe('file batches', () => {
  it('creates a batch from file_ids and polls it to completed; lists its files', async () => {
    const store = await client.vectorStores.create({ name: 'batch' });
    const ids = await Promise.all([1, 2, 3].map((i) => text(`f${i}.txt`, `file number ${i} about topic${i}`)));
    const batch = await client.vectorStores.fileBatches.createAndPoll(
      store.id,
      { file_ids: ids, attributes: { kind: 'note' } },
      { pollIntervalMs: 20 },
    );
    expect(batch).toMatchObject({
      object: 'vector_store.files_batch',
      vector_store_id: store.id,
      status: 'completed',
      file_counts: { in_progress: 0, completed: 3, failed: 0, cancelled: 0, total: 3 },
    });
    const files = await client.vectorStores.fileBatches.listFiles(batch.id, { vector_store_id: store.id });
    expect(files.data.map((f) => f.id).sort()).toEqual([...ids].sort());
    expect(files.data.every((f) => f.attributes?.kind === 'note')).toBe(true);
    expect(await client.vectorStores.fileBatches.retrieve(batch.id, { vector_store_id: store.id })).toEqual(batch);
  });

  it('takes files[] with their own attributes and chunking', async () => {
    const store = await client.vectorStores.create({ name: 'batch files' });
    const one = await text('one.txt', 'one');
    const two = await text('two.txt', 'two');
    const batch = await client.vectorStores.fileBatches.createAndPoll(
      store.id,
      {
        files: [
          { file_id: one, attributes: { n: 1 } },
          {
            file_id: two,
            chunking_strategy: { type: 'static', static: { max_chunk_size_tokens: 100, chunk_overlap_tokens: 0 } },
          },
        ],
      },
      { pollIntervalMs: 20 },
    );
    expect(batch.file_counts.completed).toBe(2);
    expect((await client.vectorStores.files.retrieve(one, { vector_store_id: store.id })).attributes).toEqual({ n: 1 });
    expect((await client.vectorStores.files.retrieve(two, { vector_store_id: store.id })).chunking_strategy).toEqual({
      type: 'static',
      static: { max_chunk_size_tokens: 100, chunk_overlap_tokens: 0 },
    });
    const both = await errorOf(
      await gateway.request(`/v1/vector_stores/${store.id}/file_batches`, {
        key: tenant.workspaceKey,
        body: { file_ids: [one], files: [{ file_id: two }] },
      }),
    );
    expect(both).toMatchObject({ status: 400, param: 'files' });
    const missing = await errorOf(
      await gateway.request(`/v1/vector_stores/${store.id}/file_batches`, {
        key: tenant.workspaceKey,
        body: { files: [{ file_id: one }, { file_id: 'file-nope' }] },
      }),
    );
    expect(missing).toMatchObject({ status: 404, code: 'file_not_found', param: 'files[1].file_id' });
  });
});
