import * as z from 'zod';
import { base64, concatBytes } from '../lib/bytes';
import type { CodeResult, SandboxErrorCode } from './sandbox';

/**
 * The sandbox over HTTP, as `gateway sandbox` serves it (server.ts) and a gateway calls it
 * (remote.ts): both ends read their shapes from here. Every request carries the shared secret as a
 * bearer token; a session is named by the id the server issued, and a request on it names its
 * workspace too, which must be the session's (another workspace's id is a session that does not
 * exist). Bytes travel as base64 in JSON, bounded by GATEWAY_SANDBOX_FILE_BYTES on both ends; a
 * file put in travels as the request's body.
 *
 * - `GET  /v1/availability` → Availability
 * - `POST /v1/sessions` {workspace_id, thread_id} → {id}
 * - `PUT  /v1/sessions/{id}/files/{name}` (the file's bytes) → 204
 * - `POST /v1/sessions/{id}/run` {code, timeout_ms?} → CodeResultWire
 * - `DELETE /v1/sessions/{id}` → 204
 * - a failure: {"error":{"code","message"}} with ERROR_STATUS's status
 */

/** The header naming the workspace whose session a request is on. */
export const WORKSPACE_HEADER = 'x-sandbox-workspace';

export const openRequest = z.object({
  workspace_id: z.string().min(1).max(256),
  thread_id: z.string().min(1).max(256),
});
export const openAnswer = z.object({ id: z.string().regex(/^[0-9a-f]{32}$/) });
export const runRequest = z.object({ code: z.string(), timeout_ms: z.number().int().positive().optional() });

const base64Text = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/);
export const codeResultWire = z.object({
  status: z.enum(['ok', 'error', 'timeout', 'killed']),
  logs: z.string(),
  logs_truncated: z.boolean(),
  images: z.array(z.object({ mime: z.literal('image/png'), data: base64Text })),
  files: z.array(z.object({ path: z.string().min(1).max(4096), data: base64Text })),
  error: z.object({ name: z.string(), value: z.string() }).optional(),
  reason: z.string().optional(),
});
export type CodeResultWire = z.infer<typeof codeResultWire>;

export const availabilityWire = z.union([
  z.object({ available: z.literal(true) }),
  z.object({ available: z.literal(false), reason: z.string().max(2048) }),
]);

const errorCodes = [
  'unavailable',
  'busy',
  'session_ended',
  'invalid_request',
  'failed',
] as const satisfies readonly SandboxErrorCode[];
export const errorWire = z.object({
  error: z.object({ code: z.enum([...errorCodes, 'unauthorized']), message: z.string().max(2048) }),
});

export type ErrorWire = z.infer<typeof errorWire>;

export const ERROR_STATUS = {
  unauthorized: 401,
  invalid_request: 400,
  session_ended: 404,
  busy: 429,
  failed: 500,
  unavailable: 503,
} as const satisfies Record<SandboxErrorCode | 'unauthorized', number>;

/** What a call's answer may hold at most: its logs, its images and files as base64, and the rest. */
export function maxResultBytes(fileBytes: number, logBytes: number): number {
  // A log character escaped in JSON takes at most six bytes (\u0000).
  return Math.ceil(fileBytes / 3) * 4 + logBytes * 6 + 64 * 1024;
}

const text = new TextDecoder();

export function toWire(result: CodeResult): CodeResultWire {
  const encode = (bytes: Uint8Array) => text.decode(base64(bytes));
  return {
    status: result.status,
    logs: result.logs,
    logs_truncated: result.logsTruncated,
    images: result.images.map((image) => ({ mime: image.mime, data: encode(image.bytes) })),
    files: result.files.map((file) => ({ path: file.path, data: encode(file.bytes) })),
    ...(result.error ? { error: result.error } : {}),
    ...(result.reason ? { reason: result.reason } : {}),
  };
}

export function fromWire(wire: CodeResultWire): CodeResult {
  return {
    status: wire.status,
    logs: wire.logs,
    logsTruncated: wire.logs_truncated,
    images: wire.images.map((image) => ({ mime: image.mime, bytes: fromBase64(image.data) })),
    files: wire.files.map((file) => ({ path: file.path, bytes: fromBase64(file.data) })),
    ...(wire.error ? { error: wire.error } : {}),
    ...(wire.reason ? { reason: wire.reason } : {}),
  };
}

/** Standard base64 (checked by the schema) to bytes, with what both runtimes have. */
function fromBase64(data: string): Uint8Array {
  const binary = atob(data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/**
 * A body's bytes, or null past `maxBytes`: read no further than one piece beyond it, and the rest
 * is never read (the stream is cancelled).
 */
export async function readAtMost(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<Uint8Array | null> {
  if (!body) return new Uint8Array(0);
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return concatBytes(parts);
      size += value.byteLength;
      if (size > maxBytes) return null;
      parts.push(value);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
