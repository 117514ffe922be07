import { readFileSync } from 'node:fs';
import { newId } from '../../src/lib/ids';
import { insertFile } from '../../src/resources/files/queries';
import type { Tenant, TestGateway } from './gateway';

/**
 * Files of a workspace, stored as the Files API stores them (the bytes in deps.blobs, the row by
 * insertFile), for the vector store tests. Once POST /v1/files is served, tests can upload instead.
 */
export async function storeFile(
  gateway: TestGateway,
  tenant: Tenant,
  file: { filename: string; content: string | Uint8Array; contentType?: string },
): Promise<string> {
  const id = newId('file');
  const bytes = typeof file.content === 'string' ? new TextEncoder().encode(file.content) : file.content;
  const blobKey = `test/${id}`;
  await gateway.deps.blobs.put(blobKey, new Blob([bytes]).stream(), { maxBytes: bytes.byteLength + 1 });
  await insertFile(gateway.database.db, {
    id,
    workspaceId: tenant.workspace.id,
    purpose: 'assistants',
    filename: file.filename,
    bytes: bytes.byteLength,
    contentType: file.contentType ?? null,
    blobKey,
    createdAt: gateway.clock.now(),
    expiresAt: null,
  });
  return id;
}

/** A fixture of test/fixtures, as bytes. */
export const fixture = (name: string): Uint8Array =>
  new Uint8Array(readFileSync(new URL(`../fixtures/${name}`, import.meta.url)));

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** Bytes that start as a PNG does (the gateway sniffs the signature; the fake decodes nothing). */
export const png = (length: number, seed = 0): Uint8Array => {
  const bytes = new Uint8Array(length).map((_, i) => (i * 13 + seed) % 256);
  bytes.set(PNG_SIGNATURE);
  return bytes;
};
