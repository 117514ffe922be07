import { randomUUID } from 'node:crypto';
import type { Dirent } from 'node:fs';
import { mkdir, open, opendir, rename, rm, stat, statfs, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Config } from '../../config';
import { capped, StoreFull, type BlobStore, type StoredBlob } from '../../lib/blob-store';

/**
 * The blob store on Node: one file per key in `root` (DATA_DIR/files, private to the owner as the
 * database is). A put writes a temporary file in `root/.uploads`, syncs it, renames it into place
 * and syncs the directory, so a key holds a whole upload or nothing, whatever happens midway (a cut
 * upload, a crash), and a put that resolved survives a power cut. The temporary files sit apart,
 * each named after its key, so that the sweeps find what a crash left without walking every
 * workspace's files (resources/files/sweep.ts).
 *
 * A put refuses to leave less than `minFreeBytes` free on the filesystem (StoreFull): looked at
 * before the first byte and again every CHECK_BYTES written, so each put under way may pass the
 * floor by that much at most.
 */

/** The directory of temporary files, under the root (a key never starts with a dot). */
const TEMPORARY = '.uploads';
/** Free space is looked at again after this many bytes written. */
const CHECK_BYTES = 1024 * 1024;
const KEY = /^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/;
/** A temporary file's name: its key with `.` for `/` (keys hold no dot), then a random suffix. */
const TEMPORARY_NAME = /^([A-Za-z0-9_.-]+)\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;
/** What earlier versions named their temporary files, beside the key's blob: the key is not in it. */
const STRAY_NAME = /^\.upload-/;

export interface DirectoryBlobStoreOptions {
  /** The free bytes a put must leave on the filesystem; 0 by default. */
  minFreeBytes?: number;
  /** The filesystem's free bytes at `path` (statfs by default). */
  freeBytes?: (path: string) => Promise<number>;
}

/** The Node store, listable for the sweep of what no row or reservation holds (resources/files/sweep.ts). */
export interface DirectoryBlobStore extends BlobStore {
  /** Every blob under the root, the temporary files first; walked as it is read, never held whole. */
  list(): AsyncIterable<StoredBlob>;
}

/** The gateway's store under DATA_DIR, with its free-space floor. */
export const nodeBlobStore = (config: Pick<Config, 'DATA_DIR' | 'GATEWAY_MIN_FREE_DISK_BYTES'>): DirectoryBlobStore =>
  directoryBlobStore(join(config.DATA_DIR, 'files'), { minFreeBytes: config.GATEWAY_MIN_FREE_DISK_BYTES });

export function directoryBlobStore(root: string, options: DirectoryBlobStoreOptions = {}): DirectoryBlobStore {
  const { minFreeBytes = 0, freeBytes = statfsFreeBytes } = options;
  const temporaries = join(root, TEMPORARY);
  const pathOf = (key: string) => {
    // Keys are the gateway's own ids; anything else is a bug that must not become a path.
    if (!KEY.test(key)) throw new Error(`not a blob key: ${key}`);
    return join(root, key);
  };
  /** Refuses to write `bytes` more when they would leave less than the floor free. */
  const keepFree = async (bytes: number) => {
    if (minFreeBytes > 0 && (await freeBytes(root)) - bytes < minFreeBytes) throw new StoreFull(minFreeBytes);
  };
  /** The temporary files of puts to `key` (each put has its own), by path. */
  const temporariesOf = async (key: string) => {
    const named = key.replaceAll('/', '.');
    const paths: string[] = [];
    for await (const entry of await openDirectory(temporaries)) {
      if (TEMPORARY_NAME.exec(entry.name)?.[1] === named) paths.push(join(temporaries, entry.name));
    }
    return paths;
  };
  return {
    async put(key, body, { maxBytes, admit }) {
      const path = pathOf(key);
      const directory = dirname(path);
      await mkdir(directory, { recursive: true, mode: 0o700 });
      await mkdir(temporaries, { recursive: true, mode: 0o700 });
      await keepFree(0);
      const temporary = join(temporaries, `${key.replaceAll('/', '.')}.${randomUUID()}`);
      const file = await open(temporary, 'wx', 0o600);
      const counted = capped(body, maxBytes);
      try {
        const reader = counted.stream.getReader();
        let unchecked = 0;
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          // Awaited only when it has to wait: most chunks are admitted at once.
          const admitting = admit?.(value.byteLength);
          if (admitting) await admitting;
          if (unchecked + value.byteLength > CHECK_BYTES) {
            await keepFree(value.byteLength);
            unchecked = 0;
          }
          unchecked += value.byteLength;
          // A write may take less than it was given; the rest goes in the next.
          for (let offset = 0; offset < value.byteLength;) {
            offset += (await file.write(value, offset)).bytesWritten;
          }
        }
        await file.sync();
        await file.close();
        await rename(temporary, path);
        await syncDirectory(directory);
        return { bytes: counted.bytes() };
      } catch (error) {
        await file.close().catch(() => undefined);
        await rm(temporary, { force: true });
        throw error;
      }
    },
    async get(key) {
      // Opened before it is streamed: a delete in between cannot fail the stream (the open file
      // stays readable), and a missing key is known before anything is answered.
      const file = await open(pathOf(key), 'r').catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT') return null;
        throw error;
      });
      if (!file) return null;
      return fileStream(file);
    },
    async delete(key) {
      const path = pathOf(key);
      for (const temporary of await temporariesOf(key)) await rm(temporary, { force: true });
      await rm(path, { force: true });
    },
    async *list() {
      for await (const entry of await openDirectory(temporaries)) {
        const named = TEMPORARY_NAME.exec(entry.name);
        const path = join(temporaries, entry.name);
        const key = named?.[1];
        if (key !== undefined && entry.isFile())
          yield { kind: 'partial', key: key.replaceAll('.', '/'), remove: () => rm(path, { force: true }) };
      }
      yield* walk(root, '');
    },
  };
}

/** The whole blobs under `directory` (`prefix` their keys' start), and strays, depth first. */
async function* walk(directory: string, prefix: string): AsyncIterable<StoredBlob> {
  for await (const entry of await openDirectory(directory)) {
    const path = join(directory, entry.name);
    if (STRAY_NAME.test(entry.name) && entry.isFile()) {
      const modifiedAt = await stat(path).then(
        (stats) => stats.mtimeMs,
        () => null,
      );
      if (modifiedAt !== null) yield { kind: 'stray', modifiedAt, remove: () => rm(path, { force: true }) };
      continue;
    }
    if (entry.name.startsWith('.')) continue;
    const key = `${prefix}${entry.name}`;
    if (entry.isDirectory()) yield* walk(path, `${key}/`);
    else if (entry.isFile() && KEY.test(key)) yield { kind: 'whole', key, remove: () => rm(path, { force: true }) };
  }
}

/** The entries of `directory`, read as they are iterated; none when it does not exist. */
async function openDirectory(directory: string): Promise<AsyncIterable<Dirent>> {
  return opendir(directory, { bufferSize: 256 }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return none();
    throw error;
  });
}

async function* none(): AsyncIterable<Dirent> {}

async function statfsFreeBytes(path: string): Promise<number> {
  const stats = await statfs(path);
  return stats.bavail * stats.bsize;
}

/** Bytes read from an open file per pull. */
const READ_BYTES = 64 * 1024;

/**
 * The file's bytes, read as they are pulled, the file closed at its end or when the reader
 * cancels. Not Readable.toWeb(createReadStream()): on Node 20 its Node stream could push one more
 * chunk after a reader had cancelled, which threw "Controller is already closed" outside any
 * caller (an ingestion stopped mid-file did that).
 */
export function fileStream(file: FileHandle): ReadableStream<Uint8Array> {
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await file.close();
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const buffer = new Uint8Array(READ_BYTES);
          const { bytesRead } = await file.read(buffer, 0, READ_BYTES, null);
          if (bytesRead > 0) {
            controller.enqueue(buffer.subarray(0, bytesRead));
            return;
          }
          await close();
          controller.close();
        } catch (error) {
          await close().catch(() => undefined);
          controller.error(error);
        }
      },
      cancel: close,
    },
    { highWaterMark: 0 },
  );
}

/** Makes a rename in `directory` durable (POSIX: the directory's entry is its own write). */
async function syncDirectory(directory: string): Promise<void> {
  const handle = await open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
