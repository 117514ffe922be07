import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { newId } from '../../lib/ids';
import { validationError } from '../../http/middleware/validate';
import type * as z from 'zod';
import { uploadFields } from './schemas';
import { releaseReservation } from './reservation-queries';
import { deleteFile, expiredFiles, insertFile, type FileRow } from './queries';
import { FRAMING_BYTES, UploadReservation } from './reservation';
import type { FilePurpose } from '../../db/schema';
import { checkUploadRequest, readUpload } from './upload';

/**
 * The file use-cases that touch both the database and the blob store: an upload (a reservation,
 * then the bytes, then the row, or nothing) and a delete (the row first, then the bytes). The
 * routes (resources/files/routes.ts) call one of these or one service, and answer.
 */

export type FileCommandDeps = Pick<Deps, 'db' | 'blobs' | 'config' | 'now' | 'log'>;

export interface UploadRequest {
  body: ReadableStream<Uint8Array> | null;
  contentType: string | undefined;
  contentLength: string | undefined;
}

/**
 * POST /v1/files: reserves room under the workspace's quota (resources/files/reservation.ts), streams the
 * `file` part into the blob store under a key of its own, each chunk reserved before it is
 * written, then checks the fields (the SDKs send them after the file) and writes the row, which
 * takes the reservation over. Any refusal or failure on the way deletes what was stored, then
 * gives the reservation back: a file is there whole, with its row, or not at all.
 */
export async function createFile(
  deps: FileCommandDeps & Pick<Deps, 'libraries'>,
  workspaceId: string,
  request: UploadRequest,
): Promise<FileRow> {
  const { body, contentType } = checkUploadRequest(request.body, request.contentType);
  const declared = /^\d{1,15}$/.test(request.contentLength ?? '') ? Number(request.contentLength) : undefined;
  return reservedFile(deps, workspaceId, declared, async (blobKey, admit) => {
    const upload = await readUpload(
      body,
      contentType,
      { blobs: deps.blobs, blobKey, maxFileBytes: deps.config.GATEWAY_MAX_FILE_BYTES, admit },
      deps.libraries.multipart,
      // Fields sent before the file (curl's order) are judged before it is stored.
      (fields) => formFields(fields, uploadFields.partial()),
    );
    if (!upload.file)
      throw new ApiError('missing_required_parameter', "Missing required parameter: 'file'.", { param: 'file' });
    if (upload.file.bytes === 0)
      throw new ApiError('invalid_value', "Invalid 'file': the file is empty (0 bytes).", { param: 'file' });
    const fields = formFields(upload.fields, uploadFields);
    return {
      purpose: fields.purpose,
      filename: upload.file.filename,
      bytes: upload.file.bytes,
      contentType: upload.file.contentType,
      expiresInMs: fields.expires_after ? fields.expires_after.seconds * 1000 : null,
    };
  });
}

/**
 * Bytes the gateway made (a code_interpreter call's figure or file) stored as a file of the
 * workspace, as an upload is: reserved under its quota (400 quota_exceeded when they do not fit),
 * then the bytes, then the row, or nothing.
 */
export async function storeFile(
  deps: FileCommandDeps,
  workspaceId: string,
  file: { filename: string; purpose: FilePurpose; contentType: string | null; bytes: Uint8Array },
): Promise<FileRow> {
  const size = file.bytes.byteLength;
  // The reservation reads a request's length, which frames the file: the file's size is the need.
  return reservedFile(deps, workspaceId, size + FRAMING_BYTES, async (blobKey, admit) => {
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(file.bytes);
        controller.close();
      },
    });
    await deps.blobs.put(blobKey, body, { maxBytes: size, admit });
    return {
      purpose: file.purpose,
      filename: file.filename,
      bytes: size,
      contentType: file.contentType,
      expiresInMs: null,
    };
  });
}

/** What a file's bytes, once stored, make of its row. */
type StoredFields = Pick<FileRow, 'purpose' | 'filename' | 'bytes' | 'contentType'> & { expiresInMs: number | null };

/**
 * A new file under a reservation of the workspace's quota: `store` puts its bytes at `blobKey`,
 * each chunk passed through `admit` first, and says what its row holds; the row then takes the
 * reservation over. A failure anywhere deletes what was stored, then gives the reservation back.
 */
async function reservedFile(
  deps: FileCommandDeps,
  workspaceId: string,
  contentLength: number | undefined,
  store: (blobKey: string, admit: UploadReservation['admit']) => Promise<StoredFields>,
): Promise<FileRow> {
  const id = newId('file');
  const blobKey = `${workspaceId}/${id}`;
  const reservation = await UploadReservation.open(deps, { workspaceId, blobKey, contentLength });
  try {
    const { expiresInMs, ...fields } = await store(blobKey, reservation.admit);
    const at = deps.now();
    const row: FileRow = {
      id,
      workspaceId,
      ...fields,
      blobKey,
      createdAt: at,
      expiresAt: expiresInMs === null ? null : at + expiresInMs,
    };
    await insertFile(deps.db, row, { maxBytes: deps.config.GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE, now: deps.now() });
    await reservation.end({ admitted: true, released: false });
    return row;
  } catch (error) {
    // Released only once nothing is stored; else it lapses, and the sweep deletes what is left.
    await reservation.end({ admitted: false, released: await forget(deps, blobKey) });
    throw error;
  }
}

/** DELETE /v1/files/{file_id}: the row (and the file's place in vector stores), then its bytes. */
export async function removeFile(deps: FileCommandDeps, workspaceId: string, id: string): Promise<void> {
  const row = await deleteFile(deps.db, workspaceId, id);
  // The reservation deleteFile left covers the bytes until they are gone (the sweep finishes a failed delete).
  if (await forget(deps, row.blobKey)) await releaseReservation(deps.db, row.blobKey);
}

/** How often the sweeps delete expired files (runtime/node/start.ts's timer, worker.ts's cron). */
export const FILE_PURGE_INTERVAL_MS = 10 * 60 * 1000;

/**
 * Deletes the files past their `expires_after` (reads already treat them as gone), as a delete
 * would: rows, places in vector stores, bytes; in batches of `batchSize`. Answers how many.
 */
export async function purgeExpiredFiles(deps: FileCommandDeps, batchSize = 100): Promise<number> {
  let purged = 0;
  for (;;) {
    const expired = await expiredFiles(deps.db, deps.now(), batchSize);
    for (const file of expired) {
      try {
        await removeFile(deps, file.workspaceId, file.id);
        purged++;
      } catch (error) {
        // Deleted by its owner in the meantime: nothing left to do.
        if (!(error instanceof ApiError && error.code === 'file_not_found')) throw error;
      }
    }
    if (expired.length < batchSize) return purged;
  }
}

/**
 * Deletes bytes that no row points at; answers whether they are gone. A failure is logged, not
 * answered: without its row the blob is unreachable, the client's request has its answer either
 * way, and the sweep of lapsed reservations tries again.
 */
async function forget(deps: FileCommandDeps, blobKey: string): Promise<boolean> {
  try {
    await deps.blobs.delete(blobKey);
    return true;
  } catch (error) {
    deps.log.warn('a file blob could not be deleted; the sweep will', { blob_key: blobKey, error });
    return false;
  }
}

/**
 * The upload's fields, checked like a JSON body (validate.ts's errors, naming the field):
 * `expires_after[anchor]` and `expires_after[seconds]` as OpenAI's SDKs write the object.
 */
function formFields<Schema extends z.ZodType>(
  fields: Readonly<Record<string, string>>,
  schema: Schema,
): z.infer<Schema> {
  const nested: Record<string, unknown> = Object.create(null);
  let expiresAfter: Record<string, string> | undefined;
  for (const [name, value] of Object.entries(fields)) {
    const inner = /^expires_after\[(\w+)\]$/.exec(name);
    const field = inner?.[1];
    if (field !== undefined) (expiresAfter ??= {})[field] = value;
    else nested[name] = value;
  }
  if (expiresAfter) nested.expires_after = expiresAfter;
  const result = schema.safeParse(nested);
  if (!result.success) throw validationError(result.error.issues, nested, 'form');
  return result.data;
}
