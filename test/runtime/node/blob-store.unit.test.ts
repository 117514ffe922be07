import { defined } from '../../support/defined';
import { mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BlobTooLarge, StoreFull, type BlobStore, type StoredBlob } from '../../../src/lib/blob-store';
import { directoryBlobStore, type DirectoryBlobStore } from '../../../src/runtime/node/blob-store';

/**
 * The blob store on Node (a directory under DATA_DIR): whole blobs or nothing, whatever the stream
 * does; the R2 store has the same cases inside workerd (test/workers/files.test.ts).
 */

let root: string;
let blobs: DirectoryBlobStore;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'blob-store-'));
  blobs = directoryBlobStore(root);
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** Every file under the root, temporary ones included. */
const filesOnDisk = () =>
  readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name).slice(root.length + 1))
    .sort();

/** `bytes` as a stream of `chunk`-byte pieces; `failAfter` pieces, it errors instead of going on. */
function streamOf(bytes: Uint8Array, chunk = 1000, failAfter = Infinity): ReadableStream<Uint8Array> {
  let offset = 0;
  let pieces = 0;
  return new ReadableStream({
    pull(controller) {
      if (pieces++ >= failAfter) return controller.error(new Error('connection reset'));
      if (offset >= bytes.byteLength) return controller.close();
      controller.enqueue(bytes.slice(offset, (offset += chunk)));
    },
  });
}

const pattern = (length: number, seed = 1) => new Uint8Array(length).map((_, i) => (i * 31 + seed) % 251);

async function read(blobs: BlobStore, key: string): Promise<Uint8Array | null> {
  const stream = await blobs.get(key);
  return stream ? new Uint8Array(await new Response(stream).arrayBuffer()) : null;
}

describe('directoryBlobStore', () => {
  it('stores, streams back and deletes a blob', async () => {
    const bytes = pattern(123_457);
    expect(await blobs.put('ws-1/file-a', streamOf(bytes), { maxBytes: 1_000_000 })).toEqual({ bytes: 123_457 });
    expect(await read(blobs, 'ws-1/file-a')).toEqual(bytes);
    expect(filesOnDisk()).toEqual(['ws-1/file-a']);
    await blobs.delete('ws-1/file-a');
    expect(await blobs.get('ws-1/file-a')).toBeNull();
    await blobs.delete('ws-1/file-a');
    expect(filesOnDisk()).toEqual([]);
  });

  it('stores exactly maxBytes, and refuses one byte more leaving nothing', async () => {
    expect(await blobs.put('ws/at-cap', streamOf(pattern(5000)), { maxBytes: 5000 })).toEqual({ bytes: 5000 });
    await expect(blobs.put('ws/over-cap', streamOf(pattern(5001)), { maxBytes: 5000 })).rejects.toBeInstanceOf(
      BlobTooLarge,
    );
    expect(filesOnDisk()).toEqual(['ws/at-cap']);
  });

  it('stops reading a too-large stream at the cap', async () => {
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled += 1000;
        controller.enqueue(new Uint8Array(1000));
      },
    });
    await expect(blobs.put('ws/endless', endless, { maxBytes: 10_000 })).rejects.toBeInstanceOf(BlobTooLarge);
    expect(pulled).toBeLessThan(20_000);
    expect(filesOnDisk()).toEqual([]);
  });

  it('leaves nothing when the stream fails midway (a cut upload), and keeps an earlier blob of the key', async () => {
    const first = pattern(3000, 7);
    await blobs.put('ws/kept', streamOf(first), { maxBytes: 1_000_000 });
    await expect(blobs.put('ws/cut', streamOf(pattern(50_000), 1000, 10), { maxBytes: 1_000_000 })).rejects.toThrow(
      'connection reset',
    );
    await expect(blobs.put('ws/kept', streamOf(pattern(50_000), 1000, 10), { maxBytes: 1_000_000 })).rejects.toThrow(
      'connection reset',
    );
    expect(filesOnDisk()).toEqual(['ws/kept']);
    expect(await read(blobs, 'ws/kept')).toEqual(first);
  });

  it('keeps concurrent puts apart, and a key written concurrently holds one whole blob', async () => {
    const many = Array.from({ length: 20 }, (_, i) => pattern(10_000 + i * 997, i));
    await Promise.all(many.map((bytes, i) => blobs.put(`ws/file-${i}`, streamOf(bytes, 333), { maxBytes: 1_000_000 })));
    for (const [i, bytes] of many.entries()) expect(await read(blobs, `ws/file-${i}`)).toEqual(bytes);

    const rivals = Array.from({ length: 8 }, (_, i) => pattern(40_000, 100 + i));
    await Promise.all(rivals.map((bytes) => blobs.put('ws/contested', streamOf(bytes, 777), { maxBytes: 1_000_000 })));
    const winner = await read(blobs, 'ws/contested');
    expect(rivals.some((bytes) => Buffer.from(bytes).equals(Buffer.from(defined(winner))))).toBe(true);
    expect(filesOnDisk().filter((path) => path.includes('.upload-'))).toEqual([]);
  });

  it('streams a blob opened before it was deleted to its end', async () => {
    const bytes = pattern(200_000);
    await blobs.put('ws/going', streamOf(bytes), { maxBytes: 1_000_000 });
    const stream = await blobs.get('ws/going');
    await blobs.delete('ws/going');
    expect(new Uint8Array(await new Response(stream).arrayBuffer())).toEqual(bytes);
  });

  it('closes the file when a reader stops early, and reads it whole again after', async () => {
    const bytes = new Uint8Array(1024 * 1024).map((_, i) => i % 251);
    await blobs.put('ws/early', streamOf(bytes, 64 * 1024), { maxBytes: bytes.byteLength });
    // This blob's descriptors only: the process's others (sockets, earlier files of this worker)
    // open and close as they please meanwhile.
    const openFiles = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).endsWith('/ws/early');
        } catch {
          return false; // closed since it was listed
        }
      }).length;
    const before = openFiles();
    expect(before).toBe(0);
    for (let round = 0; round < 20; round++) {
      const stream = defined(await blobs.get('ws/early'));
      // Open while it is read: what is counted is this blob's descriptor.
      if (round === 0) expect(openFiles()).toBe(1);
      for await (const part of stream) {
        expect(part.byteLength).toBeGreaterThan(0);
        break; // cancels the stream: the reader wants no more
      }
    }
    expect(openFiles()).toBe(before);
    const whole = new Uint8Array(await new Response(await blobs.get('ws/early')).arrayBuffer());
    expect(whole).toEqual(bytes);
  });

  it("refuses a key that is not one of the gateway's own", async () => {
    for (const key of ['../escape', 'ws/../../x', '/abs', 'ws//x', 'a b', '']) {
      await expect(blobs.put(key, streamOf(pattern(1)), { maxBytes: 10 }), key).rejects.toThrow('not a blob key');
      await expect(blobs.get(key), key).rejects.toThrow('not a blob key');
    }
    expect(filesOnDisk()).toEqual([]);
  });

  it('lets each chunk be admitted before it is written, and leaves nothing when one is not', async () => {
    const admitted: number[] = [];
    const onDiskAtAdmission: number[] = [];
    const refusal = new Error('no room');
    const admit = (bytes: number) => {
      const temporary = filesOnDisk().find((path) => path.startsWith('.uploads/'));
      onDiskAtAdmission.push(temporary ? statSync(join(root, temporary)).size : 0);
      if (admitted.reduce((sum, n) => sum + n, 0) + bytes > 3500) return Promise.reject(refusal);
      admitted.push(bytes);
      return undefined;
    };
    await expect(blobs.put('ws/admitted', streamOf(pattern(10_000)), { maxBytes: 100_000, admit })).rejects.toBe(
      refusal,
    );
    // Three chunks of 1,000 admitted, each written only after its admission; the fourth refused, unwritten.
    expect(admitted).toEqual([1000, 1000, 1000]);
    expect(onDiskAtAdmission).toEqual([0, 1000, 2000, 3000]);
    expect(filesOnDisk()).toEqual([]);
  });

  it('lists whole blobs by key, temporary files by the key they are written to, and strays; removes each alone', async () => {
    await blobs.put('ws-1/file-a', streamOf(pattern(10)), { maxBytes: 100 });
    await blobs.put('ws-2/file-b', streamOf(pattern(20)), { maxBytes: 100 });
    // A put under way: its temporary file, named after its key.
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let sent = 0;
    const slow = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (sent === 1) await held;
        if (sent++ === 2) return controller.close();
        controller.enqueue(pattern(1000));
      },
    });
    const putting = blobs.put('ws-1/file-c', slow, { maxBytes: 10_000 });
    while (!filesOnDisk().some((path) => path.startsWith('.uploads/ws-1.file-c.')))
      await new Promise((resolve) => setTimeout(resolve, 5));
    writeFileSync(join(root, 'ws-2', '.upload-0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f70'), 'left by an earlier version');

    const listed: StoredBlob[] = [];
    for await (const blob of blobs.list()) listed.push(blob);
    const described = listed
      .map((blob) => (blob.kind === 'stray' ? `stray ${typeof blob.modifiedAt}` : `${blob.kind} ${blob.key}`))
      .sort();
    expect(described).toEqual(['partial ws-1/file-c', 'stray number', 'whole ws-1/file-a', 'whole ws-2/file-b']);

    // Each goes alone: the stray and a whole blob, while the put under way is left to complete.
    await defined(listed.find((blob) => blob.kind === 'stray')).remove();
    await defined(listed.find((blob) => blob.kind === 'whole' && blob.key === 'ws-2/file-b')).remove();
    expect(filesOnDisk().filter((path) => !path.startsWith('.uploads/'))).toEqual(['ws-1/file-a']);
    release();
    expect(await putting).toEqual({ bytes: 2000 });
  });

  it('deletes what a put cut short by a crash left of a key with the key', async () => {
    await blobs.put('ws/file-d', streamOf(pattern(10)), { maxBytes: 100 });
    mkdirSync(join(root, '.uploads'), { recursive: true });
    writeFileSync(join(root, '.uploads', 'ws.file-d.0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f70'), 'cut short');
    writeFileSync(join(root, '.uploads', 'ws.file-de.0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f71'), 'another key');
    writeFileSync(join(root, '.uploads', 'ws.file-d.x.0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f72'), 'a key under it');
    await blobs.delete('ws/file-d');
    expect(filesOnDisk().sort()).toEqual([
      '.uploads/ws.file-d.x.0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f72',
      '.uploads/ws.file-de.0f8b2c1e-7d3a-4c5e-9f1a-2b3c4d5e6f71',
    ]);
  });
});

describe('directoryBlobStore with a floor of free space', () => {
  /** A filesystem of `size` bytes: free is what the store's files do not take (the real bytes written). */
  const filesystemOf = (size: number) => async () =>
    size - filesOnDisk().reduce((sum, path) => sum + statSync(join(root, path)).size, 0);

  it('refuses before writing when the filesystem is below the floor, leaving nothing', async () => {
    const full = directoryBlobStore(root, {
      minFreeBytes: 10 * 1024 * 1024,
      freeBytes: filesystemOf(10 * 1024 * 1024 - 1),
    });
    await expect(full.put('ws/file-a', streamOf(pattern(1)), { maxBytes: 10 })).rejects.toBeInstanceOf(StoreFull);
    expect(filesOnDisk()).toEqual([]);
  });

  it('stops writing as the floor comes near, within a MiB of it, leaving nothing', async () => {
    const MiB = 1024 * 1024;
    const store = directoryBlobStore(root, { minFreeBytes: 10 * MiB, freeBytes: filesystemOf(16 * MiB) });
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulled += 64 * 1024;
        controller.enqueue(new Uint8Array(64 * 1024));
      },
    });
    await expect(store.put('ws/file-b', endless, { maxBytes: 64 * MiB })).rejects.toBeInstanceOf(StoreFull);
    // It wrote up to the 6 MiB above the floor, and no more than a MiB past it.
    expect(pulled).toBeGreaterThan(5 * MiB);
    expect(pulled).toBeLessThan(8 * MiB);
    expect(filesOnDisk()).toEqual([]);
    // Below the floor's reach, a put goes through.
    expect(await store.put('ws/file-c', streamOf(pattern(3 * MiB), 64 * 1024), { maxBytes: 64 * MiB })).toEqual({
      bytes: 3 * MiB,
    });
  });

  it('reads the real filesystem by default: a floor above its free space refuses, 0 checks nothing', async () => {
    const refusing = directoryBlobStore(root, { minFreeBytes: Number.MAX_SAFE_INTEGER });
    await expect(refusing.put('ws/file-e', streamOf(pattern(1)), { maxBytes: 10 })).rejects.toBeInstanceOf(StoreFull);
    expect(
      await directoryBlobStore(root, { minFreeBytes: 0 }).put('ws/file-e', streamOf(pattern(1)), { maxBytes: 10 }),
    ).toEqual({ bytes: 1 });
  });
});
