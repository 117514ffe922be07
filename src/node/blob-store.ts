import { randomUUID } from 'node:crypto';
import { mkdir, open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { capped, type BlobStore } from '../files/blob-store';

/**
 * The blob store on Node: one file per key in `root` (DATA_DIR/files, private to the owner as the
 * database is). A put writes a temporary file beside the others, syncs it, renames it into place
 * and syncs the directory, so a key holds a whole upload or nothing, whatever happens midway (a cut
 * upload, a crash), and a put that resolved survives a power cut.
 */
export function directoryBlobStore(root: string): BlobStore {
  const pathOf = (key: string) => {
    // Keys are the gateway's own ids; anything else is a bug that must not become a path.
    if (!/^[A-Za-z0-9_-]+(\/[A-Za-z0-9_-]+)*$/.test(key)) throw new Error(`not a blob key: ${key}`);
    return join(root, key);
  };
  return {
    async put(key, body, { maxBytes }) {
      const path = pathOf(key);
      const directory = dirname(path);
      await mkdir(directory, { recursive: true, mode: 0o700 });
      const temporary = join(directory, `.upload-${randomUUID()}`);
      const file = await open(temporary, 'wx', 0o600);
      const counted = capped(body, maxBytes);
      try {
        const reader = counted.stream.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          // A write may take less than it was given; the rest goes in the next.
          for (let offset = 0; offset < value.byteLength; ) {
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
      await rm(pathOf(key), { force: true });
    },
  };
}

/** Bytes read from an open file per pull. */
const READ_BYTES = 64 * 1024;

/**
 * The file's bytes, read as they are pulled, the file closed at its end or when the reader
 * cancels. Not Readable.toWeb(createReadStream()): on Node 20 its Node stream could push one more
 * chunk after a reader had cancelled, which threw "Controller is already closed" outside any
 * caller (an ingestion stopped mid-file did that).
 */
function fileStream(file: FileHandle): ReadableStream<Uint8Array> {
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
