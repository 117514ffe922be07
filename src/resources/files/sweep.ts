import type { Deps } from '../../deps';
import { blobKeysHeld, forgetLapsedReservations, lapsedReservations } from './reservation-queries';
import type { StoredBlob } from '../../lib/blob-store';
import { UPLOAD_LEASE_MS } from './reservation';

/**
 * Deleting the bytes that no file will ever hold. Every blob the gateway writes is covered from
 * before its first byte to its end: by its upload's reservation, then by its file's row, then (once
 * the row is deleted) by a lapsed reservation until the bytes are gone (resources/files/queries.ts,
 * deleteFile). So what a crash, a kill -9 or a failed delete leaves behind is named by a lapsed
 * reservation, which sweepUploads finds through an index, on Node with the recovery sweep and on
 * Workers with the cron. sweepStoredBlobs walks a store that can list what it holds (Node's
 * directory) for what nothing names at all: what earlier versions left, bytes put there by hand.
 *
 * Neither ever deletes an upload under way, in this process or another: its reservation is live
 * (renewed while it streams), and it is written before the upload's first byte.
 */

/** Blob keys looked up, or lapsed reservations handled, per statement. */
const PAGE = 500;

export type SweepDeps = Pick<Deps, 'db' | 'blobs' | 'now'>;

/**
 * Deletes the bytes of uploads whose reservation lapsed (their process died, or stalled past the
 * lease) and of deleted files whose bytes were not deleted, whole or partly written, then their
 * reservations. Answers how many it handled.
 */
export async function sweepUploads(deps: SweepDeps): Promise<number> {
  let handled = 0;
  for (;;) {
    const now = deps.now();
    const lapsed = await lapsedReservations(deps.db, now, PAGE);
    for (const blobKey of lapsed) await deps.blobs.delete(blobKey);
    await forgetLapsedReservations(deps.db, lapsed, now);
    handled += lapsed.length;
    if (lapsed.length < PAGE) return handled;
  }
}

/**
 * Deletes the blobs of `stored` (a store's listing) that no file's row holds and no live
 * reservation covers: whole ones, and partial ones whose upload is not under way. A stray (a
 * partial blob whose key is unknown) goes once it has not been written to for a lease. Answers
 * how many it deleted.
 */
export async function sweepStoredBlobs(
  deps: Pick<SweepDeps, 'db' | 'now'>,
  stored: AsyncIterable<StoredBlob>,
): Promise<number> {
  let removed = 0;
  let page: StoredBlob[] = [];
  const sweepPage = async () => {
    // Listed before this look: a blob whose upload ends in between is seen owned, or lapsed for good.
    const now = deps.now();
    const held = await blobKeysHeld(
      deps.db,
      page.flatMap((blob) => (blob.kind === 'stray' ? [] : [blob.key])),
      now,
    );
    for (const blob of page) {
      const kept =
        blob.kind === 'stray'
          ? now - blob.modifiedAt < UPLOAD_LEASE_MS
          : held.reserved.has(blob.key) || (blob.kind === 'whole' && held.owned.has(blob.key));
      if (kept) continue;
      await blob.remove();
      removed++;
    }
    page = [];
  };
  for await (const blob of stored) {
    page.push(blob);
    if (page.length === PAGE) await sweepPage();
  }
  if (page.length > 0) await sweepPage();
  return removed;
}
