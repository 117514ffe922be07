import { defined } from '../support/defined';
import { and, eq } from 'drizzle-orm';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { vectorStoreChunks, vectorStoreFiles } from '../../src/db/schema';
import { LEASE_MS, MAX_ATTEMPTS } from '../../src/retrieval/ingest';
import { createFakeUpstream } from '../support/fake-upstream';
import { pdf } from '../support/documents';
import { storeFile } from '../support/files';
import { chunkerProcessesOf } from '../support/processes';
import { waitFor } from '../support/wait';
import { createPolicy } from '../support/ratelimit';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../support/gateway';

/**
 * Ingestion's life cycle on the real app and database: what happens to a file whose batch is
 * cancelled, or that is removed, or whose store is deleted, while its embeddings are on their way
 * (the fake provider holds them until the test lets them go); a crashed ingestion taken up again;
 * the workspace's own rate limits deferring a file rather than failing it.
 */

const upstream = createFakeUpstream();
/** Embeddings calls wait here while `held` is set; `arrived` resolves at the first one. */
let held: { release: () => void; released: Promise<void>; arrived: Promise<void>; arrive: () => void } | null = null;

function hold() {
  let release!: () => void;
  let arrive!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const arrived = new Promise<void>((resolve) => (arrive = resolve));
  held = { release, released, arrive, arrived };
  return held;
}

/** Embeddings calls to this host wait here until released: a provider that does not answer. */
const STUCK_HOST = 'stuck.test';
let stuck = hold();
held = null;

const heldFetch: typeof fetch = async (input, init) => {
  const url = String(input instanceof Request ? input.url : input);
  const gate = new URL(url).host === STUCK_HOST ? stuck : held;
  if (gate && url.endsWith('/embeddings')) {
    gate.arrive();
    await gate.released;
  }
  return upstream.fetch(input, init);
};

let gateway: TestGateway;
let tenant: Tenant;
let client: OpenAI;

beforeAll(async () => {
  gateway = await createTestGateway({ deps: { fetch: heldFetch } });
  tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  client = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
});
afterAll(async () => {
  held?.release();
  stuck.release();
  await gateway?.close();
});

const chunksOfStore = (storeId: string) =>
  gateway.database.db.select().from(vectorStoreChunks).where(eq(vectorStoreChunks.vectorStoreId, storeId));
const fileRow = async (storeId: string, fileId: string) =>
  (
    await gateway.database.db
      .select()
      .from(vectorStoreFiles)
      .where(and(eq(vectorStoreFiles.vectorStoreId, storeId), eq(vectorStoreFiles.fileId, fileId)))
  )[0];
const text = (name: string, content: string) => storeFile(gateway, tenant, { filename: name, content });

describe('ingestion interrupted by the client', () => {
  it('a batch cancelled while its files are embedded ends cancelled, its files too, with no chunks', async () => {
    const store = await client.vectorStores.create({ name: 'cancel' });
    const ids = await Promise.all([1, 2].map((i) => text(`c${i}.txt`, `cancel me ${i}`)));
    const gate = hold();
    const batch = await client.vectorStores.fileBatches.create(store.id, { file_ids: ids });
    expect(batch.status).toBe('in_progress');
    await gate.arrived;
    const cancelled = await client.vectorStores.fileBatches.cancel(batch.id, { vector_store_id: store.id });
    expect(cancelled).toMatchObject({ status: 'cancelled', file_counts: { cancelled: 2, in_progress: 0, total: 2 } });
    gate.release();
    held = null;
    await gateway.tasks.drain(20_000);
    expect(await client.vectorStores.fileBatches.retrieve(batch.id, { vector_store_id: store.id })).toMatchObject({
      status: 'cancelled',
    });
    const files = await client.vectorStores.fileBatches.listFiles(batch.id, {
      vector_store_id: store.id,
      filter: 'cancelled',
    });
    expect(files.data.length).toBe(2);
    expect(await chunksOfStore(store.id)).toEqual([]);
  });

  it('a file removed while it is embedded leaves nothing behind', async () => {
    const store = await client.vectorStores.create({ name: 'remove' });
    const fileId = await text('r.txt', 'remove me while embedding');
    const gate = hold();
    await client.vectorStores.files.create(store.id, { file_id: fileId });
    await gate.arrived;
    await client.vectorStores.files.delete(fileId, { vector_store_id: store.id });
    gate.release();
    held = null;
    await gateway.tasks.drain(20_000);
    expect(await fileRow(store.id, fileId)).toBeUndefined();
    expect(await chunksOfStore(store.id)).toEqual([]);
  });

  it('a store deleted while its file is embedded leaves nothing behind', async () => {
    const fileId = await text('d.txt', 'delete the store while embedding');
    const gate = hold();
    const store = await client.vectorStores.create({ name: 'delete', file_ids: [fileId] });
    await gate.arrived;
    await client.vectorStores.delete(store.id);
    gate.release();
    held = null;
    await gateway.tasks.drain(20_000);
    expect(await fileRow(store.id, fileId)).toBeUndefined();
    expect(await chunksOfStore(store.id)).toEqual([]);
  });
});

describe('ingestion left behind', () => {
  it('takes up a file whose ingestion crashed once its lease passed, and fails one that crashed too often', async () => {
    const store = await client.vectorStores.create({ name: 'crashed' });
    const again = await text('again.txt', 'ingested on the second attempt');
    const tooOften = await text('often.txt', 'crashed every time');
    // What a process that died mid-ingestion leaves: rows in progress, claimed, the lease running.
    const gate = hold();
    await client.vectorStores.fileBatches.create(store.id, { file_ids: [again, tooOften] });
    await gate.arrived;
    const db = gateway.database.db;
    const lease = gateway.clock.now() + LEASE_MS;
    await db
      .update(vectorStoreFiles)
      .set({ leaseExpiresAt: lease, attempts: 1 })
      .where(eq(vectorStoreFiles.fileId, again));
    await db
      .update(vectorStoreFiles)
      .set({ leaseExpiresAt: lease, attempts: MAX_ATTEMPTS })
      .where(eq(vectorStoreFiles.fileId, tooOften));
    gate.release();
    held = null;
    await gateway.tasks.drain(20_000);
    // The running ingestions lost their claims (the lease changed under them) and wrote nothing.
    expect(await fileRow(store.id, again)).toMatchObject({ status: 'in_progress' });
    expect(await chunksOfStore(store.id)).toEqual([]);

    gateway.clock.advance(LEASE_MS + 1);
    defined(gateway.deps.ingestion).wake({ waitUntil: (task) => gateway.tasks.track(task) });
    await gateway.tasks.drain(20_000);
    expect(await fileRow(store.id, again)).toMatchObject({ status: 'completed', attempts: 2 });
    const failed = await client.vectorStores.files.retrieve(tooOften, { vector_store_id: store.id });
    expect(failed.status).toBe('failed');
    expect(failed.last_error).toEqual({
      code: 'server_error',
      message: `The file's ingestion was interrupted ${MAX_ATTEMPTS} times.`,
    });
    expect((await chunksOfStore(store.id)).map((c) => c.fileId)).toEqual([again]);
  });

  it('defers a file the workspace’s own tokens policy refuses, without failing it, and ingests it once the window resets', async () => {
    const own = await gateway.tenant();
    await gateway.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
    expect(
      await createPolicy(gateway, own, {
        conditions: [{ key: 'model', value: 'text-embedding-3-small' }],
        type: 'tokens',
        unit: 'rph',
        value: 5,
      }),
    ).toBeTruthy();
    const theirs = gateway.openai({ 'x-gateway-api-key': own.workspaceKey });
    const store = await theirs.vectorStores.create({ name: 'limited' });
    const first = await storeFile(gateway, own, {
      filename: 'a.txt',
      content: 'one two three four five six seven eight',
    });
    const second = await storeFile(gateway, own, { filename: 'b.txt', content: 'nine ten' });
    expect(
      (await theirs.vectorStores.files.createAndPoll(store.id, { file_id: first }, { pollIntervalMs: 20 })).status,
    ).toBe('completed');
    await theirs.vectorStores.files.create(store.id, { file_id: second });
    await gateway.tasks.drain(20_000);
    const waiting = await fileRow(store.id, second);
    expect(waiting).toMatchObject({ status: 'in_progress', attempts: 0 });
    expect(defined(defined(waiting).leaseExpiresAt)).toBeGreaterThan(gateway.clock.now());

    gateway.clock.advance(3_600_000);
    defined(gateway.deps.ingestion).wake({ waitUntil: (task) => gateway.tasks.track(task) });
    await gateway.tasks.drain(20_000);
    expect(await fileRow(store.id, second)).toMatchObject({ status: 'completed', lastError: null });
  });
});

describe('ingestion shared between workspaces', () => {
  it('gives a workspace whose embeddings provider never answers only its share of the slots', async () => {
    // Two slots, one per workspace (the defaults): the stuck workspace's second file waits for its first.
    const slow = await gateway.tenant();
    await gateway.virtualKey(slow, { base_url: `http://${STUCK_HOST}/v1`, default: true });
    const slowClient = gateway.openai({ 'x-gateway-api-key': slow.workspaceKey });
    const ids = await Promise.all(
      [1, 2].map((i) => storeFile(gateway, slow, { filename: `slow${i}.txt`, content: `never embedded ${i}` })),
    );
    const slowStore = await slowClient.vectorStores.create({ name: 'stuck', file_ids: ids });
    await stuck.arrived;

    // Another workspace's file is ingested meanwhile, in the other slot.
    const store = await client.vectorStores.create({ name: 'unhindered' });
    const fileId = await text('quick.txt', 'ingested while the other workspace waits');
    expect(
      (await client.vectorStores.files.createAndPoll(store.id, { file_id: fileId }, { pollIntervalMs: 20 })).status,
    ).toBe('completed');
    const rows = await Promise.all(ids.map((id) => fileRow(slowStore.id, id)));
    expect(rows.map((row) => row?.attempts).sort()).toEqual([0, 1]);

    stuck.release();
    await gateway.tasks.drain(20_000);
    expect((await Promise.all(ids.map((id) => fileRow(slowStore.id, id)))).map((row) => row?.status)).toEqual([
      'completed',
      'completed',
    ]);
    stuck = hold();
    held = null;
  });
});

describe('a document that takes long to read', () => {
  it('keeps its lease while it is read, and stops being read when its store is deleted', async () => {
    const reading = await createTestGateway({
      env: { GATEWAY_INGEST_MAX_PAGES: '100000' },
      deps: { fetch: heldFetch },
    });
    try {
      const own = await reading.tenant();
      await reading.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
      const theirs = reading.openai({ 'x-gateway-api-key': own.workspaceKey });
      // Tens of seconds of CPU to read: far longer than this test waits for anything.
      const fileId = await storeFile(reading, own, { filename: 'long.pdf', content: pdf({ pageCount: 20_000 }) });
      const others = chunkerProcessesOf(process.pid);
      const store = await theirs.vectorStores.create({ name: 'long', file_ids: [fileId] });
      const row = () =>
        reading.database.db
          .select()
          .from(vectorStoreFiles)
          .where(eq(vectorStoreFiles.fileId, fileId))
          .then((rows) => rows[0]);
      const claimed = await waitFor(row, (current) => current?.leaseExpiresAt != null);
      const started = (pids: number[]) => pids.filter((pid) => !others.includes(pid));
      const [pid] = started(
        await waitFor(
          () => chunkerProcessesOf(process.pid),
          (pids) => started(pids).length === 1,
        ),
      );
      expect(pid).toBeDefined();

      // Two minutes on, the lease has less than four fifths left: it is moved on while the file is read.
      reading.clock.advance(120_000);
      const renewed = await waitFor(
        row,
        (current) => defined(defined(current).leaseExpiresAt) > defined(defined(claimed).leaseExpiresAt),
      );
      expect(defined(renewed).leaseExpiresAt).toBeGreaterThan(defined(defined(claimed).leaseExpiresAt));
      expect(chunkerProcessesOf(process.pid)).toContain(pid);

      await theirs.vectorStores.delete(store.id);
      expect(
        await waitFor(
          () => chunkerProcessesOf(process.pid),
          (pids) => !pids.includes(defined(pid)),
        ),
      ).not.toContain(pid);
      await reading.tasks.drain(20_000);
      expect(await row()).toBeUndefined();
    } finally {
      await reading.close();
    }
  });
});

describe('where ingestion is unavailable', () => {
  it('refuses to add files with ingestion_unavailable, naming the field, and writes nothing; stores without files still work', async () => {
    const bare = await createTestGateway({ deps: { fetch: upstream.fetch, ingestion: null } });
    try {
      const own = await bare.tenant();
      await bare.virtualKey(own, { base_url: 'http://fake.test/v1', default: true });
      const fileId = await storeFile(bare, own, { filename: 'x.txt', content: 'x' });
      const refused = await errorOf(
        await bare.request('/v1/vector_stores', { key: own.workspaceKey, body: { file_ids: [fileId] } }),
      );
      expect(refused).toMatchObject({ status: 400, code: 'ingestion_unavailable', param: 'file_ids[0]' });
      const store = await json(
        await bare.request('/v1/vector_stores', { key: own.workspaceKey, body: { name: 'empty' } }),
      );
      expect(store.status).toBe('completed');
      const file = await errorOf(
        await bare.request(`/v1/vector_stores/${store.id}/files`, { key: own.workspaceKey, body: { file_id: fileId } }),
      );
      expect(file).toMatchObject({ status: 400, code: 'ingestion_unavailable', param: 'file_id' });
      const list = await json(await bare.request(`/v1/vector_stores/${store.id}/files`, { key: own.workspaceKey }));
      expect(list.data).toEqual([]);
    } finally {
      await bare.close();
    }
  });
});
