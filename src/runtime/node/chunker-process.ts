import { concatBytes } from '../../lib/bytes';
import type { Chunk } from '../../retrieval/chunk';
import { chunkDocument, type ChunkJob } from '../../retrieval/chunker';
import { ExtractionError } from '../../retrieval/extract';

/**
 * A chunker process, started by runtime/node/chunker-pool.ts: reads and chunks one document at a time
 * (retrieval/chunker.ts's chunkDocument), sent over its IPC channel. Nothing else runs here, so a
 * document that takes the CPU or the memory it can takes only this process's, which the pool
 * watches and stops; the server's event loop never waits on it. It exits when its parent goes.
 */

export type ToChunker =
  | { type: 'job'; job: ChunkJob }
  | { type: 'bytes'; bytes: Uint8Array }
  /** The document's bytes are all there: chunk it. */
  | { type: 'end' }
  /** Forget the job (its file was too large). */
  | { type: 'drop' };

export type FromChunker =
  /** Listening: jobs may be sent. */
  | { type: 'ready' }
  | { type: 'chunks'; chunks: Chunk[] }
  | { type: 'refused'; code: ExtractionError['code']; message: string }
  | { type: 'failed'; message: string };

if (!process.send) throw new Error('chunker-process runs as a child process of runtime/node/chunker-pool.ts');
serve(process.send.bind(process));

function serve(send: (message: FromChunker) => void): void {
  let job: ChunkJob | null = null;
  let parts: Uint8Array[] = [];

  process.on('message', (message: ToChunker) => {
    switch (message.type) {
      case 'job':
        job = message.job;
        parts = [];
        return;
      case 'bytes':
        parts.push(message.bytes);
        return;
      case 'drop':
        job = null;
        parts = [];
        return;
      case 'end': {
        const current = job;
        const bytes = concatBytes(parts);
        job = null;
        parts = [];
        if (current !== null) void answer(send, bytes, current);
        return;
      }
    }
  });
  process.on('disconnect', () => process.exit(0));
  send({ type: 'ready' });
}

async function answer(send: (message: FromChunker) => void, bytes: Uint8Array, job: ChunkJob): Promise<void> {
  try {
    send({ type: 'chunks', chunks: await chunkDocument(bytes, job) });
  } catch (error) {
    if (error instanceof ExtractionError) send({ type: 'refused', code: error.code, message: error.message });
    else send({ type: 'failed', message: (error instanceof Error ? error.message : String(error)).slice(0, 200) });
  }
}
