import { defined } from '../../support/defined';
import { mkdirSync, readdirSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileReservations } from '../../../src/db/schema';
import { FRAMING_BYTES, UPLOAD_LEASE_MS } from '../../../src/resources/files/reservation';
import { sweepStoredBlobs, sweepUploads } from '../../../src/resources/files/sweep';
import { newId } from '../../../src/lib/ids';
import { nodeBlobStore } from '../../../src/runtime/node/blob-store';
import { deleteFile } from '../../../src/resources/files/queries';
import { createTestGateway, errorOf, json, type Tenant, type TestGateway } from '../../support/gateway';
import { waitFor } from '../../support/wait';

/**
 * Uploads reserve their bytes against the workspace's quota before writing them
 * (resources/files/reservation.ts), and what nothing will ever hold is swept (resources/files/sweep.ts): the real app
 * in-process, its database and DATA_DIR/files, with uploads whose bytes the tests hand over as
 * they please, so that the order of events is the test's, not the scheduler's.
 */

const MIB = 1024 * 1024;
const PIECE = 64 * 1024;
/** Quotas are per workspace: every test has its own tenant on one gateway of this quota. */
const QUOTA = 4 * MIB;
let gateway: TestGateway;

beforeAll(async () => {
  gateway = await createTestGateway({ env: { GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE: String(QUOTA) } });
});
afterAll(() => gateway.close());

const filesDir = () => join(gateway.dataDir, 'files');

/** Every file under DATA_DIR/files, temporary ones included, with its size. */
function onDisk(): { path: string; bytes: number }[] {
  try {
    return readdirSync(filesDir(), { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => {
        const path = join(entry.parentPath, entry.name);
        return { path: path.slice(filesDir().length + 1), bytes: statSync(path, { throwIfNoEntry: false })?.size ?? 0 };
      });
  } catch {
    return [];
  }
}

const bytesOf = (tenant: Tenant) =>
  onDisk()
    .filter((file) => file.path.includes(tenant.workspace.id))
    .reduce((sum, file) => sum + file.bytes, 0);

const reservations = () => gateway.database.db.select().from(fileReservations).orderBy(fileReservations.seq);

async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  if (!(await waitFor(condition, Boolean, 25_000, 10))) throw new Error(`never: ${what}`);
}

interface HeldUpload {
  /** Hands the gateway `bytes` more of the file, in 64 KiB pieces. */
  send(bytes: number): void;
  /** Sends the rest of the body (the purpose), and ends it. */
  finish(): void;
  /** The bytes of the body the gateway has read. */
  read(): number;
  response: Promise<Response>;
}

/** An upload whose file the test hands over piece by piece, as the SDKs send it (no Content-Length unless given). */
function heldUpload(tenant: Tenant, options: { contentLength?: number } = {}): HeldUpload {
  const boundary = `held${crypto.randomUUID()}`;
  const encoder = new TextEncoder();
  const queue: (Uint8Array | null)[] = [
    encoder.encode(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="held.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
    ),
  ];
  let wake = () => {};
  let read = 0;
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        while (queue.length === 0) await new Promise<void>((resolve) => (wake = resolve));
        // The loop above left a chunk, or the null that ends the body.
        const next = queue.shift();
        if (!next) return controller.close();
        read += next.byteLength;
        controller.enqueue(next);
      },
    },
    { highWaterMark: 0 },
  );
  const push = (...chunks: (Uint8Array | null)[]) => {
    queue.push(...chunks);
    wake();
  };
  const headers: Record<string, string> = {
    'x-gateway-api-key': tenant.workspaceKey,
    'content-type': `multipart/form-data; boundary=${boundary}`,
  };
  if (options.contentLength !== undefined) headers['content-length'] = String(options.contentLength);
  return {
    send(bytes) {
      for (let sent = 0; sent < bytes; sent += PIECE) push(new Uint8Array(Math.min(PIECE, bytes - sent)).fill(7));
    },
    finish() {
      push(
        encoder.encode(
          `\r\n--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n--${boundary}--\r\n`,
        ),
        null,
      );
    },
    read: () => read,
    response: gateway.app.request('http://gateway.test/v1/files', { method: 'POST', headers, body, duplex: 'half' }),
  };
}

/** The blob key of each reservation, oldest first. */
const reservedKeys = async () => (await reservations()).map((row) => row.blobKey);

describe('an upload reserves its bytes before they are written', () => {
  it('admits one of eight uploads that fit alone but not together, never past the quota on disk, reading none of the others whole', async () => {
    const tenant = await gateway.tenant();
    const size = 3 * MIB;
    const uploads = Array.from({ length: 8 }, () => heldUpload(tenant));
    let peak = 0;
    let streaming = true;
    const sampler = (async () => {
      while (streaming) {
        peak = Math.max(peak, bytesOf(tenant));
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
    })();
    for (const upload of uploads) {
      upload.send(size);
      upload.finish();
    }
    const answers = await Promise.all(uploads.map((upload) => upload.response));
    streaming = false;
    await sampler;
    const statuses = answers.map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(1);
    let readOfRefused = 0;
    for (const [i, response] of answers.entries()) {
      if (response.status === 200) continue;
      expect(await errorOf(response)).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'file' });
      readOfRefused += defined(uploads[i]).read();
    }
    // Refused as their room ran out, not once read whole: 3 to 4.4 MiB of their 21 were read in
    // five runs (a refused upload's room goes to the others, so the quota does not bound the sum).
    expect(readOfRefused).toBeLessThan((7 * size) / 2);
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(QUOTA);
    expect(bytesOf(tenant)).toBe(size);
    expect(await reservedKeys()).toEqual([]);
  });

  it('lets the oldest upload short of room wait while a younger one holds it; the younger gives up at its next step', async () => {
    const tenant = await gateway.tenant();
    // The younger one is sent once the older one holds its room: both reserve when their request
    // arrives, so two sent at once would be older and younger in whichever order they were served.
    const older = heldUpload(tenant);
    older.send(1.5 * MIB);
    await until(() => bytesOf(tenant) >= 1.5 * MIB, 'the older upload is written to 1.5 MiB');
    const [olderKey] = await reservedKeys();
    const younger = heldUpload(tenant);
    younger.send(1.5 * MIB);
    await until(() => bytesOf(tenant) >= 3 * MIB, 'the younger upload is written to 1.5 MiB');
    const youngerKey = (await reservedKeys()).find((key) => key !== olderKey);

    // The older one needs more than is left beside the younger one's: it waits, and says so.
    older.send(1.5 * MIB);
    await until(
      async () => (await reservations()).some((row) => row.blobKey === olderKey && row.waiting),
      'the older upload waits',
    );
    // The younger one, short of room while an older one waits, is refused at once, having read none of the rest.
    const readBefore = younger.read();
    younger.send(1.5 * MIB);
    const refused = await younger.response;
    expect(await errorOf(refused)).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'file' });
    expect(younger.read() - readBefore).toBeLessThanOrEqual(2 * PIECE);
    expect(await reservedKeys()).toEqual([olderKey]);
    expect(youngerKey).toBeDefined();

    older.finish();
    const admitted = await json(await older.response);
    expect(admitted).toMatchObject({ object: 'file', bytes: 3 * MIB });
    expect(bytesOf(tenant)).toBe(3 * MIB);
    expect(await reservedKeys()).toEqual([]);
  });

  it('refuses a workspace at its quota before the body is read, and counts the file, not its framing, against it', async () => {
    const tenant = await gateway.tenant();
    // A Content-Length that the file alone, less any framing, cannot fit: refused unread.
    const tooLong = heldUpload(tenant, { contentLength: QUOTA + FRAMING_BYTES + 1 });
    expect(await errorOf(await tooLong.response)).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'file' });
    expect(tooLong.read()).toBe(0);

    // A file that fills the quota exactly, its Content-Length (file and framing) over it: admitted.
    const exact = heldUpload(tenant, { contentLength: QUOTA + 300 });
    exact.send(QUOTA);
    exact.finish();
    expect(await json(await exact.response)).toMatchObject({ bytes: QUOTA });

    // Now at its quota: the next upload is refused before a byte of it is read, its error saying why.
    const next = heldUpload(tenant);
    const error = await errorOf(await next.response);
    expect(error).toMatchObject({ status: 400, code: 'quota_exceeded', param: 'file' });
    expect(error.message).toContain(`hold ${QUOTA} bytes`);
    expect(error.message).toContain('GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE');
    expect(next.read()).toBe(0);
    expect(await reservedKeys()).toEqual([]);
  });
});

describe('what nothing will hold is swept', () => {
  it('never sweeps an upload under way; once its reservation lapses (its process died), frees its room and deletes what it wrote', async () => {
    const tenant = await gateway.tenant();
    const stalled = heldUpload(tenant);
    stalled.send(2 * MIB);
    await until(() => bytesOf(tenant) >= 2 * MIB, 'the upload is written to 2 MiB');
    const [key] = await reservedKeys();

    expect(await sweepUploads(gateway.deps)).toBe(0);
    expect(await sweepStoredBlobs(gateway.deps, nodeBlobStore(gateway.deps.config).list())).toBe(0);
    expect(bytesOf(tenant)).toBeGreaterThanOrEqual(2 * MIB);

    gateway.clock.advance(UPLOAD_LEASE_MS + 1);
    try {
      // Lapsed: its bytes count no more, and the sweep deletes its temporary file and its reservation.
      expect(await sweepUploads(gateway.deps)).toBeGreaterThanOrEqual(1);
      expect(bytesOf(tenant)).toBe(0);
      expect(await reservedKeys()).not.toContain(key);
      const other = heldUpload(tenant);
      other.send(3 * MIB);
      other.finish();
      expect(await json(await other.response)).toMatchObject({ bytes: 3 * MIB });

      // The stalled upload, resumed, has lost its reservation: a server error, and nothing of it left.
      stalled.send(PIECE);
      stalled.finish();
      expect(await errorOf(await stalled.response)).toMatchObject({ status: 500, code: 'server_error' });
      expect(bytesOf(tenant)).toBe(3 * MIB);
    } finally {
      gateway.clock.advance(-(UPLOAD_LEASE_MS + 1));
    }
  });

  it('deletes the bytes of a deleted file whose process died before deleting them', async () => {
    const tenant = await gateway.tenant();
    const upload = heldUpload(tenant);
    upload.send(100_000);
    upload.finish();
    const file = await json(await upload.response);
    expect(bytesOf(tenant)).toBe(100_000);
    // The row goes, then the process dies: the bytes stay, covered by the lapsed reservation left in the row's place.
    await deleteFile(gateway.database.db, tenant.workspace.id, file.id);
    expect(bytesOf(tenant)).toBe(100_000);
    expect(await sweepUploads(gateway.deps)).toBeGreaterThanOrEqual(1);
    expect(bytesOf(tenant)).toBe(0);
    expect(await reservedKeys()).toEqual([]);
    // Through the API, nothing is left for the sweep.
    const again = heldUpload(tenant);
    again.send(10);
    again.finish();
    const kept = await json(await again.response);
    expect((await gateway.request(`/v1/files/${kept.id}`, { method: 'DELETE', key: tenant.workspaceKey })).status).toBe(
      200,
    );
    expect(await reservedKeys()).toEqual([]);
    expect(bytesOf(tenant)).toBe(0);
  });

  it('deletes what the directory holds that no row nor live reservation does, and strays once a lease old', async () => {
    const tenant = await gateway.tenant();
    const ws = tenant.workspace.id;
    const admitted = heldUpload(tenant);
    admitted.send(1000);
    admitted.finish();
    const file = await json(await admitted.response);
    const underWay = heldUpload(tenant);
    underWay.send(PIECE);
    await until(
      () => onDisk().some((found) => found.path.startsWith('.uploads/') && found.path.includes(ws)),
      'the upload under way is on disk',
    );

    // What a crash leaves: a blob without a row, a temporary file of an upload without a reservation,
    // and temporary files of an earlier version (the key not in their name), one old and one fresh.
    const orphan = `${ws}/${newId('file')}`;
    await gateway.deps.blobs.put(orphan, new Blob(['orphan']).stream(), { maxBytes: 100 });
    mkdirSync(join(filesDir(), '.uploads'), { recursive: true });
    writeFileSync(join(filesDir(), '.uploads', `${ws}.${newId('file')}.${crypto.randomUUID()}`), 'cut short');
    const oldStray = join(filesDir(), ws, `.upload-${crypto.randomUUID()}`);
    const freshStray = join(filesDir(), ws, `.upload-${crypto.randomUUID()}`);
    writeFileSync(oldStray, 'old');
    writeFileSync(freshStray, 'fresh');
    const anHourAgo = new Date(Date.now() - 3600_000);
    utimesSync(oldStray, anHourAgo, anHourAgo);

    const removed = await sweepStoredBlobs(gateway.deps, nodeBlobStore(gateway.deps.config).list());
    expect(removed).toBeGreaterThanOrEqual(3);
    const left = onDisk()
      .filter((found) => found.path.includes(ws))
      .map((found) => found.path);
    expect(left).toContain(`${ws}/${file.id}`);
    expect(left).toContain(freshStray.slice(filesDir().length + 1));
    expect(left.filter((path) => path.startsWith('.uploads/'))).toHaveLength(1);
    expect(left).toHaveLength(3);

    underWay.send(PIECE);
    underWay.finish();
    expect(await json(await underWay.response)).toMatchObject({ bytes: 2 * PIECE });
  });
});
