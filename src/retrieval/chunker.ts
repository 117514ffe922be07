import { concatBytes } from '../lib/bytes';
import { chunkText, TooManyChunks, type Chunk } from './chunk';
import { extract, ExtractionError, type ExtractionLimits, type FileFormat } from './extract';

/**
 * Where a document is read and cut into chunks (ingest.ts hands each file's bytes here), and the
 * one function that does it wherever that is (chunkDocument). Reading a document is the work a
 * tenant's file can make arbitrarily hard (a PDF of 20,000 pages, a parser's deep recursion), so
 * on Node it runs in processes of their own, bounded in CPU time and memory and at a lower
 * priority than the server (runtime/node/chunker-pool.ts); the ingest Worker, which answers no request,
 * runs it inline (inlineChunker) within the platform's limits.
 */

/** One document to chunk: its format, what reading it may cost, and its store file's chunking. */
export interface ChunkJob {
  format: FileFormat;
  limits: ExtractionLimits;
  /** The document's bytes at most (an ExtractionError past them, however many it claims). */
  maxBytes: number;
  maxTokens: number;
  overlapTokens: number;
  maxChunks: number;
}

export interface Chunker {
  /**
   * The chunks of the document `bytes` streams. Rejects with an ExtractionError for what the file
   * is or exceeds, and with `signal`'s reason once it is aborted (the work stops).
   */
  chunk(bytes: ReadableStream<Uint8Array>, job: ChunkJob, signal: AbortSignal): Promise<Chunk[]>;
}

/** The document's text in chunks. */
export async function chunkDocument(bytes: Uint8Array, job: ChunkJob, signal?: AbortSignal): Promise<Chunk[]> {
  const text = await extract(bytes, job.format, job.limits, signal);
  try {
    return await chunkText(text, {
      maxTokens: job.maxTokens,
      overlapTokens: job.overlapTokens,
      maxChunks: job.maxChunks,
      signal,
    });
  } catch (error) {
    if (error instanceof TooManyChunks) {
      throw new ExtractionError(
        'invalid_file',
        `The file's text makes more than ${error.maxChunks} chunks, the most a file may index.`,
      );
    }
    throw error;
  }
}

export function fileTooLarge(maxBytes: number): ExtractionError {
  return new ExtractionError('invalid_file', `The file is larger than ${maxBytes} bytes, the most a file may index.`);
}

/** Chunks in the calling process: the ingest Worker's. */
export const inlineChunker: Chunker = {
  async chunk(bytes, job, signal) {
    const parts: Uint8Array[] = [];
    let size = 0;
    for await (const part of bytes) {
      size += part.byteLength;
      // Leaving the loop cancels the stream.
      if (size > job.maxBytes) throw fileTooLarge(job.maxBytes);
      parts.push(part);
    }
    return chunkDocument(concatBytes(parts), job, signal);
  },
};
