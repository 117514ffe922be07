import type { Deps } from '../../deps';
import {
  awaitRoom,
  growReservation,
  openReservation,
  releaseReservation,
  renewReservation,
  reservationState,
  type ReservationAsk,
  type ReservationState,
} from './reservation-queries';
import { storageExceeded } from './queries';

/**
 * An upload's hold on its workspace's quota (GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE), taken before
 * its bytes are written, so that uploads under way together never hold more than the quota on
 * disk (or in the bucket), and a refused one is refused as soon as its bytes cannot fit, not once
 * it has been read whole. The reservation is a row (resources/files/reservation-queries.ts), so it holds
 * across processes and isolates; the file's row takes it over when the upload is admitted.
 *
 * - Before the body is read, the upload reserves its Content-Length when it declared one (at
 *   least the length less FRAMING_BYTES of multipart framing must fit, or it is refused at once),
 *   else a first byte: a workspace at its quota is refused before its body is read.
 * - As the file streams, each chunk is reserved before the store writes it, with a step ahead
 *   (an eighth of what it holds, from MIN_STEP to MAX_STEP): a statement per step, not per chunk,
 *   asked for while the chunks go on once half the step is used. Near the quota, where a step
 *   ahead would leave less than another step free, only what each chunk needs is taken, so that
 *   uploads that fit together are all admitted.
 * - An upload short of room is refused (400 quota_exceeded naming `file`) when the workspace's
 *   files alone leave it none, or when an older upload of the workspace waits for room; otherwise
 *   it waits (up to WAIT_MS) for the others to end, each giving back what it did not use. Uploads that
 *   would each fit alone but not together thus end with one admitted, not with each holding part
 *   of the room and all refused.
 * - The upload renews its reservation every third of UPLOAD_LEASE_MS. One whose process died
 *   lapses: its bytes count no more, and the sweeps delete what it wrote (resources/files/sweep.ts).
 */

/** A reservation not renewed for this long has lapsed. */
export const UPLOAD_LEASE_MS = 30_000;
const MIN_STEP = 1024 * 1024;
const MAX_STEP = 16 * 1024 * 1024;
/** What a Content-Length may hold besides the file: boundaries, part headers, the other fields. */
export const FRAMING_BYTES = 64 * 1024;
/** How long an upload waits for others to give back the room it needs. */
const WAIT_MS = 30_000;
const WAIT_POLL_MS = 50;

export type ReservationDeps = Pick<Deps, 'db' | 'config' | 'now' | 'log'>;

export interface ReservationRequest {
  workspaceId: string;
  blobKey: string;
  /** The request's Content-Length, when it declared one. */
  contentLength: number | undefined;
}

export class UploadReservation {
  readonly #deps: ReservationDeps;
  readonly #request: ReservationRequest;
  #reserved: number;
  #written = 0;
  #lapsed = false;
  /** The next step, asked for ahead of need while the chunks go on (null when none is). */
  #asking: Promise<void> | null = null;
  /** Whether the last step asked ahead took nothing (near the quota): none is asked again until one is needed. */
  #noRoomAhead = false;
  readonly #renewal: ReturnType<typeof setInterval>;

  private constructor(deps: ReservationDeps, request: ReservationRequest, reserved: number) {
    this.#deps = deps;
    this.#request = request;
    this.#reserved = reserved;
    this.#renewal = setInterval(() => void this.#renew(), UPLOAD_LEASE_MS / 3);
  }

  /** Reserves the upload's first bytes, before its body is read; 400 quota_exceeded when they do not fit. */
  static async open(deps: ReservationDeps, request: ReservationRequest): Promise<UploadReservation> {
    const declared =
      request.contentLength === undefined
        ? undefined
        : Math.min(request.contentLength, deps.config.GATEWAY_MAX_FILE_BYTES);
    const need = declared === undefined ? 1 : Math.max(1, declared - FRAMING_BYTES);
    const ahead = declared === undefined ? MIN_STEP : declared - need;
    const reservation = new UploadReservation(
      deps,
      request,
      await openReservation(deps.db, askOf(deps, request, need, ahead)),
    );
    try {
      // Short of room: refused, or waiting for it as a step would (the row is there to say so).
      if (reservation.#reserved < need) await reservation.#grow(need, ahead);
    } catch (error) {
      await reservation.end({ admitted: false, released: true });
      throw error;
    }
    return reservation;
  }

  /**
   * Reserves a chunk of `bytes` before the store writes it (the store's `admit`, lib/blob-store.ts):
   * at once while what is held covers it, else once a step is taken; throws quota_exceeded when
   * it cannot be (the store then writes no more). Called for one chunk at a time.
   */
  readonly admit = (bytes: number): Promise<void> | undefined => {
    if (this.#lapsed) throw lapsed();
    const written = this.#written + bytes;
    if (written > this.#reserved) return this.#admitGrown(written);
    this.#admitted(written);
    return undefined;
  };

  async #admitGrown(written: number): Promise<void> {
    await this.#asking;
    if (written > this.#reserved) await this.#grow(written - this.#reserved, this.#step());
    this.#admitted(written);
  }

  #admitted(written: number): void {
    this.#written = written;
    // Once half of what is held ahead is used, the next step is asked for beside the chunks, so
    // that the database's answer (a commit, a round trip to Turso) rarely holds them up.
    if (this.#asking === null && !this.#noRoomAhead && this.#reserved - written < this.#step() / 2) {
      this.#asking = this.#growAhead().finally(() => (this.#asking = null));
    }
  }

  /**
   * Stops renewing. Unless the file's row took the reservation over (`admitted`), gives its bytes
   * back: call it once nothing of the upload is stored, or leave `released` false to let it lapse
   * (the sweep then deletes what is left).
   */
  async end(outcome: { admitted: boolean; released: boolean }): Promise<void> {
    clearInterval(this.#renewal);
    if (outcome.admitted || !outcome.released) return;
    try {
      await releaseReservation(this.#deps.db, this.#request.blobKey);
    } catch (error) {
      this.#deps.log.warn('an upload reservation could not be released; it lapses', {
        blob_key: this.#request.blobKey,
        error,
      });
    }
  }

  /** An eighth of what the upload holds, from MIN_STEP to MAX_STEP. */
  #step(): number {
    return Math.min(MAX_STEP, Math.max(MIN_STEP, Math.floor(this.#reserved / 8)));
  }

  /** A step ahead of need, when there is room for it; a failure is left for the step that is needed. */
  async #growAhead(): Promise<void> {
    try {
      const reserved = await growReservation(this.#deps.db, askOf(this.#deps, this.#request, 0, this.#step()));
      if (reserved === null) return;
      this.#noRoomAhead = reserved === this.#reserved;
      this.#reserved = reserved;
    } catch (error) {
      this.#deps.log.warn('an upload could not reserve ahead', { blob_key: this.#request.blobKey, error });
    }
  }

  /** Takes `need` more bytes (and `ahead` when there is room for it), waiting for room when it may; else throws. */
  async #grow(need: number, ahead: number): Promise<void> {
    const deps = this.#deps;
    const deadline = deps.now() + WAIT_MS;
    let waiting = false;
    for (;;) {
      const ask = askOf(deps, this.#request, need, ahead);
      const reserved = await growReservation(deps.db, ask);
      if (reserved !== null) {
        this.#reserved = reserved;
        this.#noRoomAhead = false;
        return;
      }
      const state = await reservationState(deps.db, ask);
      if (state.own === null) throw lapsed();
      const alone = state.files + state.own + need <= deps.config.GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE;
      if (!alone || state.olderWaiting || deps.now() >= deadline) throw exceeded(deps, state);
      if (!waiting) await awaitRoom(deps.db, this.#request.blobKey, ask.now);
      waiting = true;
      await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
    }
  }

  async #renew(): Promise<void> {
    const now = this.#deps.now();
    try {
      if (!(await renewReservation(this.#deps.db, this.#request.blobKey, now, now + UPLOAD_LEASE_MS)))
        this.#lapsed = true;
    } catch (error) {
      this.#deps.log.warn('an upload reservation could not be renewed', { blob_key: this.#request.blobKey, error });
    }
  }
}

function askOf(deps: ReservationDeps, request: ReservationRequest, need: number, ahead: number): ReservationAsk {
  const now = deps.now();
  return {
    workspaceId: request.workspaceId,
    blobKey: request.blobKey,
    need,
    ahead,
    maxBytes: deps.config.GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE,
    now,
    until: now + UPLOAD_LEASE_MS,
  };
}

function exceeded(deps: ReservationDeps, state: ReservationState) {
  return storageExceeded({
    files: state.files,
    uploading: state.others,
    maxBytes: deps.config.GATEWAY_MAX_FILE_BYTES_PER_WORKSPACE,
  });
}

/** The upload outlived its reservation (its process or the database stalled past the lease): a server error. */
const lapsed = () => new Error('the upload lost its reservation: it was not renewed within its lease');
