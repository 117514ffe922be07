import { defined } from '../../support/defined';
import { createReadStream, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { count, eq } from 'drizzle-orm';
import OpenAI, { APIError, NotFoundError, toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { files, vectorStoreChunks, vectorStoreFiles, vectorStores } from '../../../src/db/schema';
import { contentDisposition } from '../../../src/resources/files/routes';
import { purgeExpiredFiles } from '../../../src/resources/files/commands';
import { MAX_FIELD_BYTES, MAX_PARTS } from '../../../src/resources/files/upload';
import { createTestGateway, errorOf, json, serveOverHttp, type Tenant, type TestGateway } from '../../support/gateway';

/**
 * Files: uploads as the OpenAI SDK sends them (file part first, chunked), the list, retrieve,
 * content and delete, the refusals that store nothing (too large, wrong purpose, 0 bytes, not
 * multipart, cut), and what a delete takes with it. The bytes are on disk under DATA_DIR/files,
 * where the tests look to see that nothing is left behind.
 */

const MAX_FILE_BYTES = 64 * 1024;
let gateway: TestGateway;
let tenant: Tenant;
let openai: OpenAI;

beforeAll(async () => {
  // A body cap far below the file cap: uploads must not be counted against it.
  gateway = await createTestGateway({
    env: { GATEWAY_MAX_BODY_BYTES: '1024', GATEWAY_MAX_FILE_BYTES: String(MAX_FILE_BYTES) },
  });
  tenant = await gateway.tenant();
  openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey });
});
afterAll(() => gateway.close());

/** Every file under DATA_DIR/files, temporary ones included. */
function storedBlobs(): string[] {
  try {
    return readdirSync(join(gateway.dataDir, 'files'), { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath, entry.name));
  } catch {
    return [];
  }
}

async function fileRows(workspaceId: string): Promise<number> {
  const [row] = await gateway.database.db.select({ n: count() }).from(files).where(eq(files.workspaceId, workspaceId));
  return defined(row).n;
}

/** A multipart body by hand, so that the tests control the order, the headers and the bytes. */
function multipart(
  parts: (
    { name: string; value: string } | { name: string; filename: string; bytes: Uint8Array | string; type?: string }
  )[],
) {
  const boundary = `----test${crypto.randomUUID()}`;
  const chunks: (string | Uint8Array)[] = [];
  for (const part of parts) {
    chunks.push(`--${boundary}\r\n`);
    if ('filename' in part) {
      chunks.push(`Content-Disposition: form-data; name="${part.name}"; filename="${part.filename}"\r\n`);
      chunks.push(`Content-Type: ${part.type ?? 'application/octet-stream'}\r\n\r\n`, part.bytes, '\r\n');
    } else {
      chunks.push(`Content-Disposition: form-data; name="${part.name}"\r\n\r\n${part.value}\r\n`);
    }
  }
  chunks.push(`--${boundary}--\r\n`);
  return { body: new Blob(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** Sends `body` chunked (a stream: no Content-Length), as the SDKs do. */
function upload(form: { body: Blob; contentType: string }, key = tenant.workspaceKey) {
  return gateway.app.request('http://gateway.test/v1/files', {
    method: 'POST',
    headers: { 'x-gateway-api-key': key, 'content-type': form.contentType },
    body: form.body.stream(),
    duplex: 'half',
  });
}

describe('POST /v1/files', () => {
  it('stores a file from the SDK (a Buffer through toFile, and a stream) and serves it back', async () => {
    const text = 'The refund policy: 30 days.\n'.repeat(100);
    const created = await openai.files.create({
      file: await toFile(Buffer.from(text), 'policy.txt'),
      purpose: 'assistants',
    });
    expect(created).toEqual({
      id: expect.stringMatching(/^file-[A-Za-z0-9]{24}$/),
      object: 'file',
      bytes: Buffer.byteLength(text),
      created_at: expect.any(Number),
      expires_at: null,
      filename: 'policy.txt',
      purpose: 'assistants',
      status: 'processed',
      status_details: null,
    });
    expect(await openai.files.retrieve(created.id)).toEqual(created);
    expect(await (await openai.files.content(created.id)).text()).toBe(text);

    // Larger than GATEWAY_MAX_BODY_BYTES (1 KiB here), from a file on disk.
    const path = join(gateway.dataDir, 'upload-source.bin');
    const bytes = new Uint8Array(40_000).map((_, i) => (i * 7) % 256);
    writeFileSync(path, bytes);
    const streamed = await openai.files.create({ file: createReadStream(path), purpose: 'vision' });
    expect(streamed).toMatchObject({ bytes: 40_000, filename: 'upload-source.bin', purpose: 'vision' });
    const content = await openai.files.content(streamed.id);
    expect(content.headers.get('content-type')).toBe('application/octet-stream');
    expect(content.headers.get('content-length')).toBe('40000');
    expect(content.headers.get('content-disposition')).toBe(
      `attachment; filename="upload-source.bin"; filename*=UTF-8''upload-source.bin`,
    );
    expect(new Uint8Array(await content.arrayBuffer())).toEqual(bytes);
  });

  it('accepts the file before the purpose, chunked, and any purpose OpenAI accepts', async () => {
    for (const purpose of ['assistants', 'batch', 'fine-tune', 'vision', 'user_data', 'evals']) {
      const response = await upload(
        multipart([
          { name: 'file', filename: 'a.jsonl', bytes: '{"a":1}\n' },
          { name: 'purpose', value: purpose },
        ]),
      );
      expect(response.status, purpose).toBe(200);
      expect(await json(response)).toMatchObject({ purpose, bytes: 8, filename: 'a.jsonl' });
    }
    // And the purpose first.
    const first = await upload(
      multipart([
        { name: 'purpose', value: 'assistants' },
        { name: 'file', filename: 'b.txt', bytes: 'b' },
      ]),
    );
    expect(await json(first)).toMatchObject({ purpose: 'assistants', bytes: 1 });
  });

  it('keeps the filename as sent, and quotes it safely on the way out', async () => {
    const name = 'résumé 履歴書 "final"; v2.pdf';
    const created = await openai.files.create({ file: await toFile(Buffer.from('%PDF'), name), purpose: 'assistants' });
    expect(created.filename).toBe(name);
    const content = await openai.files.content(created.id);
    expect(content.headers.get('content-disposition')).toBe(contentDisposition(name));
    expect(contentDisposition(name)).toBe(
      `attachment; filename="r_sum_ ___ _final_; v2.pdf"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%E5%B1%A5%E6%AD%B4%E6%9B%B8%20%22final%22%3B%20v2.pdf`,
    );
    expect(contentDisposition('../../etc/passwd')).toBe(
      `attachment; filename="../../etc/passwd"; filename*=UTF-8''..%2F..%2Fetc%2Fpasswd`,
    );
    // The name is never a path: the blob's key is the gateway's own.
    // (The SDK sends a basename; a hand-made body sends what it likes.)
    const traversal = await upload(
      multipart([
        { name: 'file', filename: '../../../escape.txt', bytes: 'x' },
        { name: 'purpose', value: 'assistants' },
      ]),
    );
    expect((await json(traversal)).filename).toBe('../../../escape.txt');
    expect(storedBlobs().every((path) => path.startsWith(join(gateway.dataDir, 'files', tenant.workspace.id)))).toBe(
      true,
    );
  });

  it('sets expires_at from expires_after, and an expired file is gone', async () => {
    const created = await openai.files.create({
      file: await toFile(Buffer.from('temporary'), 't.txt'),
      purpose: 'batch',
      expires_after: { anchor: 'created_at', seconds: 3600 },
    });
    expect(created.expires_at).toBe(created.created_at + 3600);
    const other = await gateway.tenant();
    const client = gateway.openai({ 'x-gateway-api-key': other.workspaceKey });
    const own = await client.files.create({
      file: await toFile(Buffer.from('x'), 'x.txt'),
      purpose: 'batch',
      expires_after: { anchor: 'created_at', seconds: 3600 },
    });
    gateway.clock.advance(3601_000);
    try {
      await expect(client.files.retrieve(own.id)).rejects.toBeInstanceOf(NotFoundError);
      await expect(client.files.content(own.id)).rejects.toBeInstanceOf(NotFoundError);
      expect((await client.files.list()).data).toEqual([]);
    } finally {
      gateway.clock.advance(-3601_000);
    }
    for (const [fields, param] of [
      [{ 'expires_after[anchor]': 'created_at', 'expires_after[seconds]': '60' }, 'expires_after.seconds'],
      [{ 'expires_after[anchor]': 'created_at', 'expires_after[seconds]': '2592001' }, 'expires_after.seconds'],
      [{ 'expires_after[anchor]': 'last_active_at', 'expires_after[seconds]': '3600' }, 'expires_after.anchor'],
      [{ 'expires_after[anchor]': 'created_at' }, 'expires_after.seconds'],
    ] as const) {
      const parts = [
        { name: 'file', filename: 'e.txt', bytes: 'e' },
        { name: 'purpose', value: 'batch' },
        ...Object.entries(fields).map(([name, value]) => ({ name, value })),
      ];
      const error = await errorOf(await upload(multipart(parts), other.workspaceKey));
      expect(error, JSON.stringify(fields)).toMatchObject({ status: 400, param });
    }
    expect(await fileRows(other.workspace.id)).toBe(1);
  });

  it('deletes expired files, rows and bytes, in the sweep', async () => {
    const expiring = await gateway.tenant();
    const client = gateway.openai({ 'x-gateway-api-key': expiring.workspaceKey });
    const soon = await client.files.create({
      file: await toFile(Buffer.from('soon'), 'soon.txt'),
      purpose: 'batch',
      expires_after: { anchor: 'created_at', seconds: 3600 },
    });
    const later = await client.files.create({
      file: await toFile(Buffer.from('later'), 'later.txt'),
      purpose: 'batch',
      expires_after: { anchor: 'created_at', seconds: 7200 },
    });
    const kept = await client.files.create({ file: await toFile(Buffer.from('kept'), 'kept.txt'), purpose: 'batch' });
    const blobsOf = () =>
      storedBlobs()
        .filter((path) => path.includes(expiring.workspace.id))
        .map((path) => path.slice(path.lastIndexOf('/') + 1));
    expect(blobsOf().sort()).toEqual([soon.id, later.id, kept.id].sort());
    gateway.clock.advance(3601_000);
    try {
      // Other tenants' files expiring in this window go too: at least this one.
      expect(await purgeExpiredFiles(gateway.deps)).toBeGreaterThanOrEqual(1);
      expect(await purgeExpiredFiles(gateway.deps)).toBe(0);
      expect(blobsOf().sort()).toEqual([later.id, kept.id].sort());
      expect((await client.files.list()).data.map((file) => file.id)).toEqual([kept.id, later.id]);
      expect(await fileRows(expiring.workspace.id)).toBe(2);
    } finally {
      gateway.clock.advance(-3601_000);
    }
  });
});

describe('refused uploads store nothing', () => {
  let refusing: Tenant;
  beforeAll(async () => {
    refusing = await gateway.tenant();
  });

  const cases: [
    string,
    () => { body: Blob; contentType: string },
    { status: number; code: string; param: string | null; message?: RegExp },
  ][] = [
    [
      'a wrong purpose',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'hello' },
          { name: 'purpose', value: 'memes' },
        ]),
      { status: 400, code: 'invalid_value', param: 'purpose' },
    ],
    [
      'an output purpose',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'hello' },
          { name: 'purpose', value: 'assistants_output' },
        ]),
      { status: 400, code: 'invalid_value', param: 'purpose' },
    ],
    [
      'no purpose',
      () => multipart([{ name: 'file', filename: 'a.txt', bytes: 'hello' }]),
      { status: 400, code: 'missing_required_parameter', param: 'purpose' },
    ],
    [
      'no file',
      () => multipart([{ name: 'purpose', value: 'assistants' }]),
      { status: 400, code: 'missing_required_parameter', param: 'file' },
    ],
    [
      'a file sent as a text field',
      () =>
        multipart([
          { name: 'file', value: 'hello' },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 400, code: 'invalid_value', param: 'file' },
    ],
    [
      'a 0-byte file',
      () =>
        multipart([
          { name: 'file', filename: 'empty.txt', bytes: '' },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 400, code: 'invalid_value', param: 'file', message: /empty/ },
    ],
    [
      'a file over GATEWAY_MAX_FILE_BYTES',
      () =>
        multipart([
          { name: 'file', filename: 'big.bin', bytes: new Uint8Array(MAX_FILE_BYTES + 1) },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 413, code: 'payload_too_large', param: 'file', message: /GATEWAY_MAX_FILE_BYTES/ },
    ],
    [
      'two files',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'a' },
          { name: 'file', filename: 'b.txt', bytes: 'b' },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 400, code: 'invalid_multipart', param: 'file' },
    ],
    [
      'an unknown field',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'a' },
          { name: 'purpose', value: 'assistants' },
          { name: 'colour', value: 'red' },
        ]),
      { status: 400, code: 'unknown_parameter', param: 'colour' },
    ],
    [
      'a field over its cap',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'a' },
          { name: 'purpose', value: 'a'.repeat(MAX_FIELD_BYTES + 1) },
        ]),
      { status: 400, code: 'invalid_value', param: 'purpose' },
    ],
    [
      'too many parts',
      () =>
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'a' },
          ...Array.from({ length: MAX_PARTS }, (_, i) => ({ name: `f${i}`, value: 'x' })),
        ]),
      { status: 400, code: 'invalid_multipart', param: null },
    ],
    [
      'a control character in the filename',
      () =>
        multipart([
          { name: 'file', filename: 'a\u0007.txt', bytes: 'a' },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 400, code: 'invalid_value', param: 'file' },
    ],
    [
      'a filename too long',
      () =>
        multipart([
          { name: 'file', filename: `${'n'.repeat(600)}.txt`, bytes: 'a' },
          { name: 'purpose', value: 'assistants' },
        ]),
      { status: 400, code: 'invalid_value', param: 'file' },
    ],
    [
      'a body without its closing boundary',
      () => {
        const whole = multipart([
          { name: 'file', filename: 'a.txt', bytes: 'hello' },
          { name: 'purpose', value: 'assistants' },
        ]);
        return { body: whole.body.slice(0, whole.body.size - 60), contentType: whole.contentType };
      },
      { status: 400, code: 'invalid_multipart', param: null },
    ],
    [
      'a multipart type without a boundary',
      () => ({ body: new Blob(['x']), contentType: 'multipart/form-data' }),
      { status: 400, code: 'invalid_multipart', param: null },
    ],
    [
      'a JSON body',
      () => ({ body: new Blob(['{"purpose":"assistants"}']), contentType: 'application/json' }),
      { status: 415, code: 'unsupported_media_type', param: null, message: /multipart\/form-data/ },
    ],
    [
      'a raw file',
      () => ({ body: new Blob(['hello']), contentType: 'application/octet-stream' }),
      { status: 415, code: 'unsupported_media_type', param: null, message: /multipart\/form-data/ },
    ],
  ];

  for (const [name, form, expected] of cases) {
    it(name, async () => {
      const before = storedBlobs().length;
      const error = await errorOf(await upload(form(), refusing.workspaceKey));
      expect(error).toMatchObject({ status: expected.status, code: expected.code, param: expected.param });
      if (expected.message) expect(error.message).toMatch(expected.message);
      expect(storedBlobs().length).toBe(before);
      expect(await fileRows(refusing.workspace.id)).toBe(0);
    });
  }

  it('a body without a content type is 415 too, and so is a JSON body through the SDK', async () => {
    const response = await gateway.request('/v1/files', {
      method: 'POST',
      key: refusing.workspaceKey,
      headers: {},
      body: 'hello',
    });
    expect(await errorOf(response)).toMatchObject({ status: 415, code: 'unsupported_media_type' });
  });

  it('an upload over the cap is refused without its body being read to the end', async () => {
    const boundary = 'endless';
    const head = new TextEncoder().encode(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="huge.bin"\r\n\r\n`,
    );
    let pulled = 0;
    const total = 64 * 1024 * 1024;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(head);
      },
      pull(controller) {
        if (pulled >= total) return controller.close();
        pulled += 65_536;
        controller.enqueue(new Uint8Array(65_536).fill(65));
      },
    });
    const response = await gateway.app.request('http://gateway.test/v1/files', {
      method: 'POST',
      headers: {
        'x-gateway-api-key': refusing.workspaceKey,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body,
      duplex: 'half',
    });
    expect(await errorOf(response)).toMatchObject({ status: 413, param: 'file' });
    expect(pulled).toBeLessThan(16 * MAX_FILE_BYTES);
    expect(await fileRows(refusing.workspace.id)).toBe(0);
  });

  it('a wrong purpose sent before the file is refused before the file is read', async () => {
    const boundary = 'purposefirst';
    const head = new TextEncoder().encode(
      `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nmemes\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n`,
    );
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(head);
      },
      pull(controller) {
        if (pulled >= MAX_FILE_BYTES / 2) return controller.close();
        pulled += 4096;
        controller.enqueue(new Uint8Array(4096));
      },
    });
    const response = await gateway.app.request('http://gateway.test/v1/files', {
      method: 'POST',
      headers: {
        'x-gateway-api-key': refusing.workspaceKey,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body,
      duplex: 'half',
    });
    expect(await errorOf(response)).toMatchObject({ status: 400, code: 'invalid_value', param: 'purpose' });
    expect(pulled).toBeLessThan(MAX_FILE_BYTES / 4);
    expect(await fileRows(refusing.workspace.id)).toBe(0);
  });

  it('a stream that fails mid-body leaves neither a blob, a temporary file nor a row', async () => {
    const errorsBefore = gateway.logs.filter((line) => line.includes('"level":"error"')).length;
    const whole = multipart([
      { name: 'file', filename: 'cut.bin', bytes: new Uint8Array(30_000).fill(7) },
      { name: 'purpose', value: 'assistants' },
    ]);
    const bytes = new Uint8Array(await whole.body.arrayBuffer());
    let sent = false;
    const cut = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (!sent) {
          sent = true;
          controller.enqueue(bytes.subarray(0, 20_000));
        } else {
          controller.error(new Error('connection reset'));
        }
      },
    });
    const response = await gateway.app.request('http://gateway.test/v1/files', {
      method: 'POST',
      headers: { 'x-gateway-api-key': refusing.workspaceKey, 'content-type': whole.contentType },
      body: cut,
      duplex: 'half',
    });
    expect(await errorOf(response)).toMatchObject({ status: 400, code: 'invalid_multipart' });
    expect(storedBlobs().filter((path) => path.includes(refusing.workspace.id))).toEqual([]);
    expect(await fileRows(refusing.workspace.id)).toBe(0);
    // The client's doing, not the gateway's: nothing logged as an error.
    expect(gateway.logs.filter((line) => line.includes('"level":"error"')).length).toBe(errorsBefore);
  });

  it('a store that fails is a 500, logged, and leaves no row', async () => {
    const broken = await gateway.tenant();
    // Where the workspace's directory should be, a file: the directory store cannot write there.
    mkdirSync(join(gateway.dataDir, 'files'), { recursive: true });
    writeFileSync(join(gateway.dataDir, 'files', broken.workspace.id), 'in the way');
    const error = await errorOf(
      await upload(
        multipart([
          { name: 'file', filename: 'a.txt', bytes: 'hello' },
          { name: 'purpose', value: 'assistants' },
        ]),
        broken.workspaceKey,
      ),
    );
    expect(error).toMatchObject({ status: 500, code: 'server_error' });
    expect(await fileRows(broken.workspace.id)).toBe(0);
    expect(gateway.logs.some((line) => line.includes('"level":"error"') && line.includes('/v1/files'))).toBe(true);
  });

  it('a client that disconnects mid-upload from the Node server leaves nothing behind', async () => {
    const { url, close } = await serveOverHttp(gateway);
    try {
      const { port } = new URL(url);
      const whole = multipart([
        { name: 'file', filename: 'gone.bin', bytes: new Uint8Array(50_000).fill(1) },
        { name: 'purpose', value: 'assistants' },
      ]);
      const bytes = new Uint8Array(await whole.body.arrayBuffer());
      const socket = connect(Number(port), '127.0.0.1');
      await new Promise<void>((resolve) => socket.once('connect', resolve));
      socket.write(
        `POST /v1/files HTTP/1.1\r\nhost: 127.0.0.1\r\nx-gateway-api-key: ${refusing.workspaceKey}\r\n` +
          `content-type: ${whole.contentType}\r\ntransfer-encoding: chunked\r\n\r\n`,
      );
      const half = bytes.subarray(0, 30_000);
      socket.write(`${half.byteLength.toString(16)}\r\n`);
      socket.write(half);
      socket.write('\r\n');
      // Seen by the gateway once its temporary file exists: the upload is under way.
      await until(() => storedBlobs().some((path) => path.includes(refusing.workspace.id)));
      socket.destroy();
      // The handler ends (the access log records it) and cleans up.
      await until(() =>
        gateway.logs.some((line) => line.includes('"path":"/v1/files"') && line.includes('"status":400')),
      );
      await until(() => !storedBlobs().some((path) => path.includes(refusing.workspace.id)));
      expect(await fileRows(refusing.workspace.id)).toBe(0);
    } finally {
      await close();
    }
  });
});

/** Waits for `condition`, checking every 10 ms, failing after 10 seconds. */
async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('the condition did not become true');
}

describe("a workspace's storage cap", () => {
  it('refuses an upload that would pass GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE, exactly, also when uploads finish together', async () => {
    const capped = await createTestGateway({ env: { GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE: '100' } });
    try {
      const owner = await capped.tenant();
      const send = (bytes: number, key = owner.workspaceKey) =>
        capped.app.request('http://gateway.test/v1/files', {
          method: 'POST',
          headers: { 'x-gateway-api-key': key },
          body: (() => {
            const form = new FormData();
            form.set('file', new Blob([new Uint8Array(bytes).fill(1)]), 'f.bin');
            form.set('purpose', 'assistants');
            return form;
          })(),
        });
      const blobs = () =>
        readdirSync(join(capped.dataDir, 'files'), { recursive: true }).filter((name) =>
          String(name).includes('file-'),
        );
      // Five of 30 bytes at once: three fit.
      const answers = await Promise.all(Array.from({ length: 5 }, () => send(30)));
      expect(answers.map((response) => response.status).sort()).toEqual([200, 200, 200, 400, 400]);
      const refused = await errorOf(defined(answers.find((response) => response.status === 400)));
      expect(refused).toMatchObject({ code: 'quota_exceeded', param: 'file' });
      expect(refused.message).toContain('GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE');
      expect(blobs()).toHaveLength(3);
      expect((await send(11)).status).toBe(400);
      expect((await send(10)).status).toBe(200);
      // At the cap: refused before the body is read.
      const request = new Request('http://gateway.test/v1/files', {
        method: 'POST',
        headers: { 'x-gateway-api-key': owner.workspaceKey, 'content-type': 'multipart/form-data; boundary=x' },
        body: 'never read',
      });
      expect(await errorOf(await capped.app.request(request))).toMatchObject({ status: 400, code: 'quota_exceeded' });
      expect(request.bodyUsed).toBe(false);
      // Another workspace has its own.
      expect((await send(100, (await capped.tenant()).workspaceKey)).status).toBe(200);
      // Deleting frees room.
      const thirty = (await json(await capped.request('/v1/files', { key: owner.workspaceKey }))).data.find(
        (file: { bytes: number }) => file.bytes === 30,
      );
      expect(
        (await capped.request(`/v1/files/${thirty.id}`, { method: 'DELETE', key: owner.workspaceKey })).status,
      ).toBe(200);
      expect((await send(30)).status).toBe(200);
    } finally {
      await capped.close();
    }
  });
});

describe("the disk's free space", () => {
  it('refuses an upload that would leave less than GATEWAY_MIN_FREE_DISK_BYTES free: 507, not retried, nothing stored', async () => {
    // A floor no disk is above: the store refuses before the file's first byte is written.
    const full = await createTestGateway({ env: { GATEWAY_MIN_FREE_DISK_BYTES: String(Number.MAX_SAFE_INTEGER) } });
    try {
      const owner = await full.tenant();
      const client = full.openai({ 'x-gateway-api-key': owner.workspaceKey });
      const refused = await client.files
        .create({ file: await toFile(Buffer.from('no room'), 'full.txt'), purpose: 'assistants' })
        .catch((error: unknown) => error);
      expect(refused).toMatchObject({ status: 507, code: 'insufficient_storage', param: null });
      expect(refused instanceof APIError && refused.headers?.get('x-should-retry')).toBe('false');
      expect(
        readdirSync(join(full.dataDir, 'files'), { recursive: true }).filter((name) => String(name).includes('file-')),
      ).toEqual([]);
      expect((await client.files.list()).data).toEqual([]);
      expect(
        defined((await full.database.client.execute('SELECT count(*) AS n FROM file_reservations')).rows[0]).n,
      ).toBe(0);
      expect(full.logs.some((line) => line.includes('"level":"error"') && line.includes('StoreFull'))).toBe(true);
    } finally {
      await full.close();
    }
  });
});

describe('GET /v1/files', () => {
  it('lists newest first, by purpose, in pages with after, and asc', async () => {
    const lister = await gateway.tenant();
    const client = gateway.openai({ 'x-gateway-api-key': lister.workspaceKey });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const purpose = i % 2 === 0 ? 'assistants' : 'vision';
      ids.push((await client.files.create({ file: await toFile(Buffer.from(`file ${i}`), `f${i}.txt`), purpose })).id);
    }
    const all = await client.files.list();
    expect(all.data.map((file) => file.id)).toEqual([...ids].reverse());
    expect(all.has_more).toBe(false);

    const assistants = await client.files.list({ purpose: 'assistants' });
    expect(assistants.data.map((file) => file.id)).toEqual([ids[4], ids[2], ids[0]]);

    const first = await client.files.list({ limit: 2 });
    expect(first.data.map((file) => file.id)).toEqual([ids[4], ids[3]]);
    expect(first.has_more).toBe(true);
    const second = await client.files.list({ limit: 2, after: ids[3] });
    expect(second.data.map((file) => file.id)).toEqual([ids[2], ids[1]]);
    // The SDK's auto-pagination walks them all.
    const walked: string[] = [];
    for await (const file of client.files.list({ limit: 2 })) walked.push(file.id);
    expect(walked).toEqual([...ids].reverse());

    const ascending = await json(await gateway.request('/v1/files?order=asc&limit=3', { key: lister.workspaceKey }));
    expect(ascending).toMatchObject({ object: 'list', first_id: ids[0], last_id: ids[2], has_more: true });
  });

  it('refuses a bad query, naming the parameter', async () => {
    for (const [query, param] of [
      ['limit=0', 'limit'],
      ['limit=10001', 'limit'],
      ['order=up', 'order'],
      ['purpose=memes', 'purpose'],
      ['after=file-nope', 'after'],
      ['before=file-x', 'before'],
    ] as const) {
      const error = await errorOf(await gateway.request(`/v1/files?${query}`, { key: tenant.workspaceKey }));
      expect(error, query).toMatchObject({ status: 400, param });
    }
  });
});

describe('DELETE /v1/files/{file_id}', () => {
  it('deletes the row and the bytes, and the file is gone everywhere', async () => {
    const deleter = await gateway.tenant();
    const client = gateway.openai({ 'x-gateway-api-key': deleter.workspaceKey });
    const created = await client.files.create({
      file: await toFile(Buffer.from('bye'), 'bye.txt'),
      purpose: 'assistants',
    });
    expect(storedBlobs().filter((path) => path.includes(deleter.workspace.id))).toHaveLength(1);
    expect(await client.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
    expect(storedBlobs().filter((path) => path.includes(deleter.workspace.id))).toEqual([]);
    await expect(client.files.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(client.files.content(created.id)).rejects.toBeInstanceOf(NotFoundError);
    const again = await client.files.delete(created.id).catch((error: unknown) => error);
    expect(again).toBeInstanceOf(NotFoundError);
    expect(again).toMatchObject({ code: 'file_not_found' });
  });

  it('removes the file from its vector stores, chunks included, in the same batch: it is never searchable again', async () => {
    const owner = await gateway.tenant();
    const client = gateway.openai({ 'x-gateway-api-key': owner.workspaceKey });
    const kept = await client.files.create({
      file: await toFile(Buffer.from('kept'), 'kept.txt'),
      purpose: 'assistants',
    });
    const doomed = await client.files.create({
      file: await toFile(Buffer.from('doomed'), 'doomed.txt'),
      purpose: 'assistants',
    });
    const db = gateway.database.db;
    const now = Date.now();
    const stores = ['vs_filesTestStoreA', 'vs_filesTestStoreB'].map((id) => `${id}${crypto.randomUUID().slice(0, 8)}`);
    for (const id of stores) {
      await db.insert(vectorStores).values({
        id,
        workspaceId: owner.workspace.id,
        metadata: {},
        createdAt: now,
        lastActiveAt: now,
        embeddingModel: 'm',
      });
      for (const file of [kept, doomed]) {
        await db.insert(vectorStoreFiles).values({
          vectorStoreId: id,
          fileId: file.id,
          workspaceId: owner.workspace.id,
          status: 'completed',
          chunkingStrategy: { type: 'other' },
          attributes: {},
          createdAt: now,
        });
        await db.insert(vectorStoreChunks).values({
          vectorStoreId: id,
          fileId: file.id,
          chunkIndex: 0,
          text: `zebra ${file.filename}`,
          tokens: 2,
          embedding: new Uint8Array(8),
        });
      }
    }
    const keyword = async () =>
      defined(
        (
          await gateway.database.client.execute(
            `SELECT count(*) AS n FROM vector_store_chunks_fts WHERE vector_store_chunks_fts MATCH '"zebra"' AND vector_store_id IN ('${stores[0]}', '${stores[1]}')`,
          )
        ).rows[0],
      ).n;
    expect(await keyword()).toBe(4);

    await client.files.delete(doomed.id);
    const left = await db
      .select({ fileId: vectorStoreFiles.fileId })
      .from(vectorStoreFiles)
      .where(eq(vectorStoreFiles.workspaceId, owner.workspace.id));
    expect(left.map((row) => row.fileId)).toEqual([kept.id, kept.id]);
    const chunks = await db
      .select({ fileId: vectorStoreChunks.fileId })
      .from(vectorStoreChunks)
      .where(eq(vectorStoreChunks.fileId, doomed.id));
    expect(chunks).toEqual([]);
    expect(await keyword()).toBe(2);
  });
});

describe('workspaces', () => {
  it("another workspace's file is a 404 for every route, and never listed", async () => {
    const owner = await gateway.tenant();
    const stranger = await gateway.tenant({ organisationId: owner.organisationId });
    const mine = await gateway
      .openai({ 'x-gateway-api-key': owner.workspaceKey })
      .files.create({ file: await toFile(Buffer.from('secret'), 's.txt'), purpose: 'assistants' });
    const theirs = gateway.openai({ 'x-gateway-api-key': stranger.workspaceKey });
    for (const call of [
      () => theirs.files.retrieve(mine.id),
      () => theirs.files.content(mine.id),
      () => theirs.files.delete(mine.id),
    ]) {
      const error = await call().catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(NotFoundError);
      expect(error).toMatchObject({ code: 'file_not_found' });
    }
    expect((await theirs.files.list()).data).toEqual([]);
    expect(
      await errorOf(await gateway.request(`/v1/files?after=${mine.id}`, { key: stranger.workspaceKey })),
    ).toMatchObject({ status: 400, param: 'after' });
    // The organisation key names the workspace, as for assistants.
    const viaOrg = await gateway.request(`/v1/files/${mine.id}`, {
      key: owner.orgKey,
      headers: { 'x-gateway-workspace-id': owner.workspace.slug },
    });
    expect(await json(viaOrg)).toMatchObject({ id: mine.id });
    expect(
      await (await gateway.openai({ 'x-gateway-api-key': owner.workspaceKey }).files.content(mine.id)).text(),
    ).toBe('secret');
  });

  it('an upload needs a key, and an organisation key names its workspace', async () => {
    const form = multipart([
      { name: 'file', filename: 'a.txt', bytes: 'a' },
      { name: 'purpose', value: 'assistants' },
    ]);
    expect(await errorOf(await upload(form, ''))).toMatchObject({ status: 401 });
    const owner = await gateway.tenant();
    expect(await errorOf(await upload(form, owner.orgKey))).toMatchObject({
      status: 400,
      param: 'x-gateway-workspace-id',
    });
    expect(await fileRows(owner.workspace.id)).toBe(0);
  });
});
