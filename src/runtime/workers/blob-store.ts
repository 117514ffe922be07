import { capped, type BlobStore } from '../../lib/blob-store';

/** R2 wants every part of a multipart upload but the last at least 5 MiB; these are 8. */
const PART_BYTES = 8 * 1024 * 1024;

/**
 * The blob store on Workers: an R2 bucket. An upload's length is not known in advance (the SDKs
 * send multipart bodies chunked), and R2's single put needs it, so the bytes go up as a multipart
 * upload in 8 MiB parts, one part in memory at a time; a cut or too-large upload is aborted, which
 * leaves nothing in the bucket.
 */
export function r2BlobStore(bucket: R2Bucket): BlobStore {
  return {
    async put(key, body, { maxBytes, admit }) {
      const counted = capped(body, maxBytes);
      const reader = counted.stream.getReader();
      const buffer = new Uint8Array(PART_BYTES);
      let filled = 0;
      let upload: R2MultipartUpload | undefined;
      const parts: R2UploadedPart[] = [];
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          // Awaited only when it has to wait: most chunks are admitted at once.
          const admitting = admit?.(value.byteLength);
          if (admitting) await admitting;
          let offset = 0;
          while (offset < value.byteLength) {
            const take = Math.min(PART_BYTES - filled, value.byteLength - offset);
            buffer.set(value.subarray(offset, offset + take), filled);
            filled += take;
            offset += take;
            if (filled === PART_BYTES) {
              upload ??= await bucket.createMultipartUpload(key);
              parts.push(await upload.uploadPart(parts.length + 1, buffer.slice(0, filled)));
              filled = 0;
            }
          }
        }
        if (!upload) {
          // Small enough for one part: a plain put, whose length is known now.
          await bucket.put(key, buffer.slice(0, filled));
        } else {
          if (filled > 0) parts.push(await upload.uploadPart(parts.length + 1, buffer.slice(0, filled)));
          await upload.complete(parts);
        }
        return { bytes: counted.bytes() };
      } catch (error) {
        await upload?.abort().catch(() => undefined);
        throw error;
      }
    },
    async get(key) {
      const object = await bucket.get(key);
      return object?.body ?? null;
    },
    async delete(key) {
      await bucket.delete(key);
    },
  };
}
