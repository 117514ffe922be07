import { and, eq, inArray, lte, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { fileReservations, files } from '../../db/schema';

/**
 * Uploads' reservations against their workspace's quota (the table's comment, db/schema.ts; the
 * use-case, resources/files/reservation.ts). Every change that could pass the quota is one conditional
 * statement that counts the workspace's files and its other live reservations: SQLite runs a
 * statement as one write transaction and writers take turns, across processes too, so that
 * however many uploads grow at once, what they hold with the files never passes the quota.
 */

/** The bytes of the workspace's files (expired ones included until they are deleted). */
export const filesBytes = (workspaceId: string): SQL =>
  sql`(SELECT coalesce(sum(${files.bytes}), 0) FROM ${files} WHERE ${files.workspaceId} = ${workspaceId})`;

/** The bytes the workspace's uploads under way hold at `now`, but for the one writing `exceptKey`. */
export const reservedBytes = (workspaceId: string, now: number, exceptKey: string): SQL =>
  sql`(SELECT coalesce(sum(other.bytes), 0) FROM file_reservations AS other
        WHERE other.workspace_id = ${workspaceId} AND other.expires_at > ${now} AND other.blob_key <> ${exceptKey})`;

/** Whether the reservation of `blobKey` is live at `now`. */
export const reservationLive = (blobKey: string, now: number): SQL =>
  sql`EXISTS (SELECT 1 FROM file_reservations AS own WHERE own.blob_key = ${blobKey} AND own.expires_at > ${now})`;

export interface ReservationAsk {
  workspaceId: string;
  blobKey: string;
  /** The bytes that must fit now, or nothing is taken. */
  need: number;
  /**
   * Taken besides `need` when that leaves at least as much again free: room for the next chunks,
   * so that they need no statement, which near the quota is left to the other uploads.
   */
  ahead: number;
  /** GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE. */
  maxBytes: number;
  now: number;
  /** The reservation lapses at this time unless renewed. */
  until: number;
}

/** The room under the quota beside the workspace's files and its other uploads' live reservations. */
const roomFor = (ask: ReservationAsk) =>
  sql`(SELECT ${ask.maxBytes} - ${filesBytes(ask.workspaceId)} - ${reservedBytes(ask.workspaceId, ask.now, ask.blobKey)} AS free) AS room`;

/** What a reservation holding `held` takes of `free`: `need`, and `ahead` when that leaves as much again. */
const taken = (ask: ReservationAsk, held: SQL) =>
  sql`${ask.need} + CASE WHEN room.free - ${held} - ${ask.need} >= 2 * ${ask.ahead} THEN ${ask.ahead} ELSE 0 END`;

/**
 * Opens an upload's reservation with its first bytes (as growReservation takes them), or with none
 * when `need` does not fit. Answers the bytes reserved.
 */
export async function openReservation(db: Db, ask: ReservationAsk): Promise<number> {
  const [row] = await db.all<{ bytes: number }>(sql`
    INSERT INTO file_reservations (blob_key, workspace_id, bytes, expires_at)
    SELECT ${ask.blobKey}, ${ask.workspaceId}, CASE WHEN room.free >= ${ask.need} THEN ${taken(ask, sql`0`)} ELSE 0 END, ${ask.until}
    FROM ${roomFor(ask)}
    RETURNING bytes`);
  return Number(row?.bytes ?? 0);
}

/**
 * Grows a live reservation by `need` bytes (and `ahead` more when they leave as much free), if
 * `need` fits beside the workspace's files and its other uploads' live reservations, renewing it
 * and ending its wait. Answers the bytes it now holds, or null when `need` does not fit or the
 * reservation lapsed (nothing was written).
 */
export async function growReservation(db: Db, ask: ReservationAsk): Promise<number | null> {
  const [row] = await db.all<{ bytes: number }>(sql`
    UPDATE file_reservations
    SET bytes = file_reservations.bytes + ${taken(ask, sql`file_reservations.bytes`)}, expires_at = ${ask.until}, waiting = 0
    FROM ${roomFor(ask)}
    WHERE file_reservations.blob_key = ${ask.blobKey} AND file_reservations.expires_at > ${ask.now}
      AND room.free - file_reservations.bytes >= ${ask.need}
    RETURNING file_reservations.bytes AS bytes`);
  return row ? Number(row.bytes) : null;
}

/** What holds the workspace's room at `now`, when a reservation could not take what it asked. */
export interface ReservationState {
  /** The workspace's files' bytes. */
  files: number;
  /** What its other uploads under way hold. */
  others: number;
  /** What this upload holds; null when its reservation lapsed. */
  own: number | null;
  /** Whether an upload that reserved before this one waits for room. */
  olderWaiting: boolean;
}

export async function reservationState(
  db: Db,
  ask: Pick<ReservationAsk, 'workspaceId' | 'blobKey' | 'now'>,
): Promise<ReservationState> {
  const [row] = await db.all<{ files: number; others: number; own: number | null; older_waiting: number }>(sql`
    SELECT ${filesBytes(ask.workspaceId)} AS files,
      ${reservedBytes(ask.workspaceId, ask.now, ask.blobKey)} AS others,
      own.bytes AS own,
      EXISTS (SELECT 1 FROM file_reservations AS other
        WHERE other.workspace_id = ${ask.workspaceId} AND other.expires_at > ${ask.now} AND other.waiting AND other.seq < own.seq) AS older_waiting
    FROM (SELECT 1) LEFT JOIN file_reservations AS own ON own.blob_key = ${ask.blobKey} AND own.expires_at > ${ask.now}`);
  return {
    files: Number(row?.files ?? 0),
    others: Number(row?.others ?? 0),
    own: row?.own === null || row?.own === undefined ? null : Number(row.own),
    olderWaiting: Boolean(row?.older_waiting),
  };
}

/** Marks a live reservation as waiting for room: younger uploads short of room give up meanwhile. */
export async function awaitRoom(db: Db, blobKey: string, now: number): Promise<void> {
  await db.run(
    sql`UPDATE file_reservations SET waiting = 1 WHERE blob_key = ${blobKey} AND expires_at > ${now} AND NOT waiting`,
  );
}

/** Keeps a live reservation live until `until`; false when it had lapsed (it stays lapsed). */
export async function renewReservation(db: Db, blobKey: string, now: number, until: number): Promise<boolean> {
  const renewed = await db.all(sql`
    UPDATE file_reservations SET expires_at = ${until}
    WHERE blob_key = ${blobKey} AND expires_at > ${now}
    RETURNING seq`);
  return renewed.length > 0;
}

/** Gives the reservation's bytes back (its upload ended, whatever the outcome). */
export async function releaseReservation(db: Db, blobKey: string): Promise<void> {
  await db.delete(fileReservations).where(eq(fileReservations.blobKey, blobKey));
}

/**
 * Up to `limit` blob keys of reservations lapsed at `now` that no file's row holds: uploads whose
 * process died (or stalled past the lease) with their bytes, whole or partial, maybe still stored.
 */
export async function lapsedReservations(db: Db, now: number, limit: number): Promise<string[]> {
  const rows = await db
    .select({ blobKey: fileReservations.blobKey })
    .from(fileReservations)
    .where(
      and(
        lte(fileReservations.expiresAt, now),
        sql`NOT EXISTS (SELECT 1 FROM ${files} WHERE ${files.blobKey} = ${fileReservations.blobKey})`,
      ),
    )
    .orderBy(fileReservations.expiresAt)
    .limit(limit);
  return rows.map((row) => row.blobKey);
}

/** Deletes the reservations of `blobKeys` that are lapsed at `now` (a lapsed one never comes back). */
export async function forgetLapsedReservations(db: Db, blobKeys: string[], now: number): Promise<void> {
  if (blobKeys.length === 0) return;
  await db
    .delete(fileReservations)
    .where(and(inArray(fileReservations.blobKey, blobKeys), lte(fileReservations.expiresAt, now)));
}

/**
 * Of `blobKeys`, those a file's row holds (`owned`) and those a live reservation holds at `now`
 * (`reserved`), read in one statement: an upload's row and the release of its reservation commit
 * together, so a blob being admitted is seen as one or the other, never neither.
 */
export async function blobKeysHeld(
  db: Db,
  blobKeys: string[],
  now: number,
): Promise<{ owned: Set<string>; reserved: Set<string> }> {
  const owned = new Set<string>();
  const reserved = new Set<string>();
  if (blobKeys.length === 0) return { owned, reserved };
  const rows = await db.all<{ key: string; owned: number; reserved: number }>(sql`
    SELECT asked.value AS key,
      EXISTS (SELECT 1 FROM ${files} WHERE ${files.blobKey} = asked.value) AS owned,
      EXISTS (SELECT 1 FROM file_reservations AS r WHERE r.blob_key = asked.value AND r.expires_at > ${now}) AS reserved
    FROM json_each(${JSON.stringify(blobKeys)}) AS asked`);
  for (const row of rows) {
    if (row.owned) owned.add(row.key);
    if (row.reserved) reserved.add(row.key);
  }
  return { owned, reserved };
}
