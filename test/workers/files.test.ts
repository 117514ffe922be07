import { defined } from '../support/defined';
import { createClient } from '@libsql/client/web';
import { createExecutionContext, createScheduledController } from 'cloudflare:test';
import { env, exports } from 'cloudflare:workers';
import OpenAI, { NotFoundError, toFile } from 'openai';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import { BlobTooLarge, type BlobStore } from '../../src/lib/blob-store';
import worker from '../../src/worker';
import { r2BlobStore } from '../../src/runtime/workers/blob-store';
import { errorOf, json } from '../support/envelope';
import { fakeProviderKey } from './gateway-client';

/**
 * Files inside workerd, their bytes in the local R2 bucket that wrangler.toml declares (FILES):
 * the R2 blob store's cases (one put, the multipart upload of a stream past 8 MiB, too large, cut,
 * concurrent), and the SDK's upload, retrieve, content, list and delete through the Worker, an
 * upload larger than GATEWAY_MAX_BODY_BYTES (2048 here) included.
 */

const MiB = 1024 * 1024;
const API_KEY = inject('workersTenant').workspaceKey;

/** `length` bytes in `chunk`-byte pieces, generated as they are read; errors after `failAfter` bytes. */
function streamOf(length: number, seed: number, chunk = 256 * 1024, failAfter = Infinity): ReadableStream<Uint8Array> {
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= failAfter) return controller.error(new Error('connection reset'));
      if (offset >= length) return controller.close();
      const size = Math.min(chunk, length - offset);
      controller.enqueue(pattern(offset, size, seed));
      offset += size;
    },
  });
}

const pattern = (start: number, size: number, seed: number) =>
  new Uint8Array(size).map((_, i) => ((start + i) * 31 + seed) % 251);

/** Whether the blob at `key` is exactly streamOf(length, seed)'s bytes, read as a stream. */
async function holds(blobs: BlobStore, key: string, length: number, seed: number): Promise<boolean> {
  const stream = await blobs.get(key);
  if (!stream) return false;
  let offset = 0;
  let same = true;
  for await (const chunk of stream) {
    const expected = pattern(offset, chunk.byteLength, seed);
    if (!chunk.every((byte, i) => byte === expected[i])) same = false;
    offset += chunk.byteLength;
  }
  return same && offset === length;
}

const keysUnder = async (prefix: string) => (await env.FILES.list({ prefix })).objects.map((object) => object.key);

describe('r2BlobStore', () => {
  const blobs = r2BlobStore(env.FILES);
  const prefix = `test-${crypto.randomUUID()}`;

  it('stores, streams back and deletes a small blob (one put)', async () => {
    expect(await blobs.put(`${prefix}/small`, streamOf(100_000, 1, 4096), { maxBytes: MiB })).toEqual({
      bytes: 100_000,
    });
    expect(await holds(blobs, `${prefix}/small`, 100_000, 1)).toBe(true);
    await blobs.delete(`${prefix}/small`);
    expect(await blobs.get(`${prefix}/small`)).toBeNull();
    await blobs.delete(`${prefix}/small`);
  });

  it('stores a stream past 8 MiB as a multipart upload, whole', async () => {
    const length = 17 * MiB + 123;
    expect(await blobs.put(`${prefix}/large`, streamOf(length, 2), { maxBytes: 32 * MiB })).toEqual({ bytes: length });
    expect(await holds(blobs, `${prefix}/large`, length, 2)).toBe(true);
    expect((await env.FILES.head(`${prefix}/large`))?.size).toBe(length);
  });

  it('refuses a blob over the cap, in one part or several, leaving nothing', async () => {
    await expect(blobs.put(`${prefix}/over-small`, streamOf(5001, 3, 1000), { maxBytes: 5000 })).rejects.toBeInstanceOf(
      BlobTooLarge,
    );
    await expect(
      blobs.put(`${prefix}/over-large`, streamOf(12 * MiB, 3), { maxBytes: 9 * MiB }),
    ).rejects.toBeInstanceOf(BlobTooLarge);
    expect(await keysUnder(`${prefix}/over`)).toEqual([]);
  });

  it('leaves nothing when the stream fails, before or after its first part went up', async () => {
    await expect(
      blobs.put(`${prefix}/cut-early`, streamOf(4 * MiB, 4, 256 * 1024, MiB), { maxBytes: 32 * MiB }),
    ).rejects.toThrow('connection reset');
    await expect(
      blobs.put(`${prefix}/cut-late`, streamOf(20 * MiB, 4, 256 * 1024, 10 * MiB), { maxBytes: 32 * MiB }),
    ).rejects.toThrow('connection reset');
    expect(await keysUnder(`${prefix}/cut`)).toEqual([]);
  });

  it('lets each chunk be admitted first, and leaves nothing when one is not, before or after its first part went up', async () => {
    for (const [name, limit] of [
      ['early', MiB],
      ['late', 10 * MiB],
    ] as const) {
      let admitted = 0;
      const admit = (bytes: number) => {
        if (admitted + bytes > limit) return Promise.reject(new Error('no room'));
        admitted += bytes;
        return undefined;
      };
      await expect(
        blobs.put(`${prefix}/refused-${name}`, streamOf(20 * MiB, 5), { maxBytes: 32 * MiB, admit }),
      ).rejects.toThrow('no room');
      expect(admitted).toBe(limit);
    }
    expect(await keysUnder(`${prefix}/refused`)).toEqual([]);
  });

  it('keeps concurrent puts apart', async () => {
    const lengths = Array.from({ length: 6 }, (_, i) => 50_000 + i * 10_007);
    await Promise.all(
      lengths.map((length, i) => blobs.put(`${prefix}/many-${i}`, streamOf(length, 10 + i, 3000), { maxBytes: MiB })),
    );
    for (const [i, length] of lengths.entries())
      expect(await holds(blobs, `${prefix}/many-${i}`, length, 10 + i)).toBe(true);
  });
});

describe('/v1/files on workerd', () => {
  let openai: OpenAI;
  beforeAll(() => {
    openai = new OpenAI({
      apiKey: API_KEY,
      baseURL: 'http://gateway/v1',
      maxRetries: 0,
      fetch: (url, init) => exports.default.fetch(url, init),
    });
  });

  it('uploads with the SDK, retrieves, lists, serves the content and deletes', async () => {
    const text = 'Refunds are accepted within 30 days.\n'.repeat(200); // 7,400 bytes: over GATEWAY_MAX_BODY_BYTES
    const created = await openai.files.create({
      file: await toFile(new TextEncoder().encode(text), 'refunds.txt'),
      purpose: 'assistants',
    });
    expect(created).toMatchObject({
      object: 'file',
      bytes: text.length,
      filename: 'refunds.txt',
      purpose: 'assistants',
      status: 'processed',
    });
    expect(await openai.files.retrieve(created.id)).toEqual(created);
    expect((await openai.files.list({ purpose: 'assistants' })).data.map((file) => file.id)).toContain(created.id);
    const content = await openai.files.content(created.id);
    expect(content.headers.get('content-disposition')).toContain('filename="refunds.txt"');
    expect(new TextDecoder().decode(await content.arrayBuffer())).toBe(text);

    const row = await json(
      await exports.default.fetch(`http://gateway/v1/files/${created.id}`, {
        headers: { authorization: `Bearer ${API_KEY}` },
      }),
    );
    expect(row.id).toBe(created.id);
    expect(await openai.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
    await expect(openai.files.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(openai.files.content(created.id)).rejects.toBeInstanceOf(NotFoundError);
  });

  it('leaves nothing in the bucket when the upload is cut', async () => {
    const workspaceId = inject('workersTenant').workspace.id;
    const before = (await keysUnder(`${workspaceId}/`)).length;
    const boundary = 'cutcutcut';
    const head = new TextEncoder().encode(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="cut.bin"\r\n\r\n`,
    );
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(head);
      },
      pull(controller) {
        // Past R2's first 8 MiB part, so that a multipart upload was under way when it ended. (It
        // ends rather than errors: workerd reports a request body's error as uncaught, whoever reads it.)
        if (sent >= 9 * MiB) return controller.close();
        sent += 256 * 1024;
        controller.enqueue(new Uint8Array(256 * 1024).fill(9));
      },
    });
    const response = await exports.default.fetch('http://gateway/v1/files', {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
    });
    expect(await errorOf(response)).toMatchObject({ status: 400, code: 'invalid_multipart' });
    expect((await keysUnder(`${workspaceId}/`)).length).toBe(before);
    expect((await openai.files.list()).data.filter((file) => file.filename === 'cut.bin')).toEqual([]);
  });

  it('refuses a wrong purpose and a non-multipart body, storing nothing', async () => {
    // Other test files store files in this workspace meanwhile: this one looks for its own only.
    const filename = `wrong-purpose-${crypto.randomUUID()}.txt`;
    const wrong = await openai.files
      .create({ file: await toFile(new TextEncoder().encode('x'), filename), purpose: 'memes' as 'assistants' })
      .catch((error: unknown) => error);
    expect(wrong).toMatchObject({ status: 400, param: 'purpose' });
    const raw = await exports.default.fetch('http://gateway/v1/files', {
      method: 'POST',
      headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
      body: '{"purpose":"assistants"}',
    });
    expect(await errorOf(raw)).toMatchObject({ status: 415, code: 'unsupported_media_type' });
    expect((await openai.files.list()).data.filter((file) => file.filename === filename)).toEqual([]);
  });

  it("sends an image_file part to the provider as a data: URL, from R2, in the run's executor object", async () => {
    const slug = `files-${crypto.randomUUID().slice(0, 8)}`;
    await fakeProviderKey(API_KEY, slug);
    const client = openai.withOptions({ defaultHeaders: { 'x-gateway-virtual-key': slug } });
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3, 4, 5]);
    const image = await client.files.create({ file: await toFile(png, 'dot.png'), purpose: 'vision' });
    const assistant = await client.beta.assistants.create({ model: 'fake-model' });
    // The fake answers with the messages it was sent (the provider's records stay in Node).
    const text = 'What is this?\n#fake {"echo_messages":true}';
    const run = await client.beta.threads.createAndRunPoll(
      {
        assistant_id: assistant.id,
        thread: {
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text },
                { type: 'image_file', image_file: { file_id: image.id } },
              ],
            },
          ],
        },
      },
      { pollIntervalMs: 50 },
    );
    expect(run.status).toBe('completed');
    const [answer] = (await client.beta.threads.messages.list(run.thread_id, { run_id: run.id })).data;
    const first = defined(defined(answer).content[0]);
    const sent = JSON.parse(first.type === 'text' ? first.text.value : '[]');
    expect(sent).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text },
          {
            type: 'image_url',
            image_url: { url: `data:image/png;base64,${btoa(String.fromCharCode(...png))}`, detail: 'auto' },
          },
        ],
      },
    ]);
  });

  it("deletes on the cron what an upload whose isolate died left in R2, never an upload under way's", async () => {
    const workspaceId = inject('workersTenant').workspace.id;
    const database = createClient({ url: inject('sqldUrl') });
    const [lapsed, live] = ['lapsed', 'live'].map(
      (name) => `${workspaceId}/file-${name}${crypto.randomUUID().replaceAll('-', '')}`,
    ) as [string, string];
    try {
      // What the database and the bucket hold when an isolate dies mid-upload (its reservation no
      // longer renewed) while another isolate's upload goes on.
      await env.FILES.put(lapsed, 'left by an isolate that died');
      await env.FILES.put(live, 'an upload under way');
      await database.execute({
        sql: 'INSERT INTO file_reservations (blob_key, workspace_id, bytes, expires_at) VALUES (?, ?, 1024, ?), (?, ?, 1024, ?)',
        args: [lapsed, workspaceId, Date.now() - 1, live, workspaceId, Date.now() + 60_000],
      });
      await worker.scheduled(createScheduledController(), env, createExecutionContext());
      expect(await env.FILES.head(lapsed)).toBeNull();
      expect(await env.FILES.head(live)).not.toBeNull();
      const left = await database.execute({
        sql: 'SELECT blob_key FROM file_reservations WHERE blob_key IN (?, ?)',
        args: [lapsed, live],
      });
      expect(left.rows.map((row) => row.blob_key)).toEqual([live]);
    } finally {
      await database.execute({ sql: 'DELETE FROM file_reservations WHERE blob_key = ?', args: [live] });
      await env.FILES.delete(live);
      database.close();
    }
  });
});
