import { concatBytes } from './bytes';

/**
 * Reading what another server sends outside the answer itself (an error page, an error body):
 * at most so many bytes, however much it sends or its compression inflates.
 */

/**
 * At most `maxBytes` of a body (as the runtime hands it over: decompressed), and whether there was
 * more. Whatever follows is never read: the body is cancelled, which drops the connection, so a
 * small compressed body that inflates to gigabytes costs no more than the cap.
 */
export async function readAtMost(
  body: AsyncIterable<Uint8Array> | null,
  maxBytes: number,
): Promise<{ bytes: Uint8Array; cut: boolean }> {
  if (!body) return { bytes: new Uint8Array(0), cut: false };
  const chunks = body[Symbol.asyncIterator]();
  const parts: Uint8Array[] = [];
  let size = 0;
  let cut = false;
  try {
    while (size < maxBytes) {
      const { done, value } = await chunks.next();
      if (done) break;
      const kept = value.subarray(0, maxBytes - size);
      parts.push(kept);
      size += kept.length;
      cut = kept.length < value.length;
    }
    cut ||= size >= maxBytes;
  } finally {
    await release(chunks);
  }
  return { bytes: concatBytes(parts), cut };
}

/**
 * Lets go of a body being read: cancelled (the connection dropped) unless it was read to its end.
 * A body that fails to cancel has nothing more to give either.
 */
export async function release(chunks: AsyncIterator<Uint8Array>): Promise<void> {
  await chunks.return?.()?.catch(() => undefined);
}
