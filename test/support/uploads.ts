/**
 * Uploads as the SDKs send them (multipart, the file part first, chunked, no Content-Length), their
 * bytes generated as they are sent, so that the client holds none of them: for the reliability
 * suite and bench:files. The file's bytes follow a pattern of their seed, so that what the gateway
 * serves back can be checked without keeping a copy.
 */

const CHUNK = 64 * 1024;

/** The file's byte at `offset`, for `seed`. */
export const patternByte = (offset: number, seed: number): number => (offset * 31 + seed) % 251;

export interface UploadBody {
  body: ReadableStream<Uint8Array>;
  contentType: string;
  /** The file's bytes handed to the client so far. */
  sent(): number;
  /** Lets an upload held at `holdAt` go on. */
  release(): void;
}

/** A multipart body of `bytes` file bytes of `seed`'s pattern; with `holdAt`, it stops there until released. */
export function uploadBody(bytes: number, options: { seed?: number; holdAt?: number } = {}): UploadBody {
  const { seed = 0, holdAt = Infinity } = options;
  const boundary = `upload${Math.random().toString(36).slice(2)}`;
  const encoder = new TextEncoder();
  const head = encoder.encode(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="upload.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = encoder.encode(
    `\r\n--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nassistants\r\n--${boundary}--\r\n`,
  );
  // The pattern repeats every 251 bytes: chunks are cut from one buffer at the right phase.
  const cycle = new Uint8Array(CHUNK + 251).map((_, i) => patternByte(i, seed));
  let produced = 0;
  let stage: 'head' | 'file' | 'done' = 'head';
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (stage === 'head') {
        stage = 'file';
        return controller.enqueue(head);
      }
      if (stage === 'file' && produced < bytes) {
        if (produced >= holdAt) await released;
        const size = Math.min(CHUNK, bytes - produced, produced < holdAt ? holdAt - produced : Infinity);
        const phase = produced % 251;
        produced += size;
        // A view, not a copy: the buffer is never written again.
        return controller.enqueue(cycle.subarray(phase, phase + size));
      }
      if (stage !== 'done') {
        stage = 'done';
        return controller.enqueue(tail);
      }
      controller.close();
    },
  });
  return { body, contentType: `multipart/form-data; boundary=${boundary}`, sent: () => produced, release };
}

/** Whether `stream` holds exactly `bytes` bytes of `seed`'s pattern, read as it comes. */
export async function holdsPattern(stream: ReadableStream<Uint8Array>, bytes: number, seed: number): Promise<boolean> {
  let offset = 0;
  let same = true;
  for await (const chunk of stream) {
    for (let i = 0; i < chunk.byteLength && same; i++) same = chunk[i] === patternByte(offset + i, seed);
    offset += chunk.byteLength;
  }
  return same && offset === bytes;
}

export interface Sent {
  status: number;
  body: any;
  /** The file's bytes the client had sent when the answer came. */
  sentBeforeAnswer: number;
}

/** POSTs `form` to `url`'s /v1/files with the workspace key `key`, streamed. */
export async function sendUpload(url: string, key: string, form: UploadBody): Promise<Sent> {
  const response = await fetch(`${url}/v1/files`, {
    method: 'POST',
    headers: { 'x-gateway-api-key': key, 'content-type': form.contentType },
    body: form.body,
    duplex: 'half',
  });
  const sentBeforeAnswer = form.sent();
  return { status: response.status, body: await response.json(), sentBeforeAnswer };
}
