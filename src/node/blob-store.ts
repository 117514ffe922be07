import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { capped, type BlobStore } from '../files/blob-store';

/**
 * The blob store on Node: one file per key in `root` (DATA_DIR/files, private to the owner as the
 * database is). A put writes a temporary file beside the others, syncs it and renames it into
 * place, so a key holds a whole upload or nothing, whatever happens midway (a cut upload, a crash).
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
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      const temporary = join(dirname(path), `.upload-${randomUUID()}`);
      const file = await open(temporary, 'wx', 0o600);
      const counted = capped(body, maxBytes);
      try {
        const reader = counted.stream.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          await file.write(value);
        }
        await file.sync();
        await file.close();
        await rename(temporary, path);
        return { bytes: counted.bytes() };
      } catch (error) {
        await file.close().catch(() => undefined);
        await rm(temporary, { force: true });
        throw error;
      }
    },
    async get(key) {
      const path = pathOf(key);
      try {
        await stat(path);
      } catch {
        return null;
      }
      return Readable.toWeb(createReadStream(path)) as ReadableStream<Uint8Array>;
    },
    async delete(key) {
      await rm(pathOf(key), { force: true });
    },
  };
}
