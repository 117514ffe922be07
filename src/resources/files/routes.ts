import * as z from 'zod';
import { Hono } from 'hono';
import { ApiError } from '../../errors';
import { createFile, removeFile } from './commands';
import { ownBody } from '../../http/middleware/own-body';
import { validate } from '../../http/middleware/validate';
import { workspace } from '../identities/middleware/workspace';
import { listFilesQuery } from './schemas';
import { getFile, listFiles, type FileRow } from './queries';
import type { Deps } from '../../deps';
import { toFileJson } from './wire';
import { listObject } from '../../http/lists';
import type { ApiEnv } from '../identities/env';
import { responds } from '../../http/middleware/responds';
import { deletedObject, listOf } from '../../http/objects';
import { fileObject } from './objects';

/**
 * /v1/files, in the workspace of workspace(). An upload is multipart/form-data, read by the route
 * itself (ownBody(): neither the JSON reading nor GATEWAY_MAX_BODY_BYTES applies; its own cap is
 * GATEWAY_MAX_FILE_BYTES), streamed into the blob store.
 */
export const fileRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post('/', responds({ summary: 'Upload a file', ok: fileObject, errors: [413, 415, 507] }), ownBody(), async (c) => {
    const row = await createFile(c.get('deps'), c.get('actor').workspaceId, {
      body: c.req.raw.body,
      contentType: c.req.header('content-type'),
      contentLength: c.req.header('content-length'),
    });
    return c.json(toFileJson(row));
  })
  .get(
    '/',
    responds({ summary: 'List files', ok: listOf(fileObject) }),
    validate('query', listFilesQuery),
    async (c) => {
      const { db, now } = c.get('deps');
      const page = await listFiles(db, c.get('actor').workspaceId, c.req.valid('query'), now());
      return c.json(listObject(page, toFileJson));
    },
  )
  .get('/:file_id', responds({ summary: 'Retrieve a file', ok: fileObject }), async (c) => {
    const { db, now } = c.get('deps');
    const row = await getFile(db, c.get('actor').workspaceId, c.req.param('file_id'), now());
    return c.json(toFileJson(row));
  })
  .delete('/:file_id', responds({ summary: 'Delete a file', ok: deletedObject('file') }), async (c) => {
    const id = c.req.param('file_id');
    await removeFile(c.get('deps'), c.get('actor').workspaceId, id);
    return c.json({ id, object: 'file' as const, deleted: true });
  })
  .get(
    '/:file_id/content',
    responds({ summary: "Retrieve a file's content", ok: () => z.string(), bytes: true }),
    async (c) => {
      const { db, now, blobs } = c.get('deps');
      const row = await getFile(db, c.get('actor').workspaceId, c.req.param('file_id'), now());
      return fileContent(blobs, row);
    },
  );

/** A file's bytes as a download, from the blob store. */
export async function fileContent(blobs: Deps['blobs'], row: FileRow): Promise<Response> {
  const body = await blobs.get(row.blobKey);
  // A row without its bytes is the store's fault (lost or deleted behind the gateway's back).
  if (!body)
    throw new ApiError('server_error', undefined, { cause: new Error(`the blob of file ${row.id} is missing`) });
  return new Response(body, {
    headers: {
      'content-type': 'application/octet-stream',
      'content-length': String(row.bytes),
      'content-disposition': contentDisposition(row.filename),
      'x-content-type-options': 'nosniff',
    },
  });
}

/**
 * `attachment` with the filename twice, as RFC 6266 advises: `filename` an ASCII stand-in (other
 * characters, quotes and backslashes as `_`), `filename*` the name itself, UTF-8 percent-encoded.
 * A filename never reaches a header unescaped.
 */
export function contentDisposition(filename: string): string {
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, '_');
  const encoded = encodeURIComponent(filename).replace(
    /['()*]/g,
    (char) => `%${char.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}
