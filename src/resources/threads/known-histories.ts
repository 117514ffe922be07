import type { Db, RawStatement } from '../../db/client';
import type { MessageRow, ThreadKey } from './queries';

/**
 * What this process or isolate knows of the threads it wrote that no run has touched yet: their
 * messages, as its own writes made them (a thread created with its messages, a message added).
 * A thread's first run builds its prompt from them before anything is read, so that the
 * provider's call starts beside the run's write instead of after it (runs/commands.ts,
 * runInOneTrip); the write carries a guard (`guard`) that fails it, writing nothing, unless the
 * thread still has exactly these messages, in this order, and no run. What is known is only ever
 * a guess that the database confirms: a message another process added or deleted, or a run
 * another made, fails the guard, and the run is made from what it reads instead.
 *
 * Bounded: at most MAX_THREADS threads of at most MAX_MESSAGES messages and MAX_BYTES bytes of
 * content each, MAX_TOTAL_BYTES in all, the least recently written forgotten first; a thread past a
 * bound is forgotten.
 * Kept per database client (one per process, or per isolate on Workers), as prepared queries are.
 */
export class KnownHistories {
  /** In least-recently-written order: a write moves its thread to the end. */
  readonly #threads = new Map<string, { workspaceId: string; messages: MessageRow[]; bytes: number }>();
  /** The bytes of content of every thread known. */
  #bytes = 0;

  /** A thread just created with `messages`, or one they were added to while its messages were known. */
  wrote(thread: ThreadKey, messages: MessageRow[], created: boolean): void {
    const known = this.#threads.get(thread.id);
    this.forget(thread.id);
    if (!created && (!known || known.workspaceId !== thread.workspaceId)) return;
    const all = [...(known && !created ? known.messages : []), ...messages];
    const bytes = (known && !created ? known.bytes : 0) + messages.reduce((sum, row) => sum + contentBytes(row), 0);
    if (all.length > MAX_MESSAGES || bytes > MAX_BYTES) return;
    this.#threads.set(thread.id, { workspaceId: thread.workspaceId, messages: all, bytes });
    this.#bytes += bytes;
    for (const oldest of this.#threads.keys()) {
      if (this.#threads.size <= MAX_THREADS && this.#bytes <= MAX_TOTAL_BYTES) break;
      this.forget(oldest);
    }
  }

  /** Forgets the thread (deleted). A message deleted is not told here: the guard finds it. */
  forget(threadId: string): void {
    const known = this.#threads.get(threadId);
    if (!known) return;
    this.#threads.delete(threadId);
    this.#bytes -= known.bytes;
  }

  /**
   * The thread's messages as known, for the run about to be made on it, which the run's write
   * guards; forgotten here, since after the run (made or not) they are not the thread's history any
   * more. Null when they are not known, or are more than `maxBytes` (a history read would keep
   * only the newest of them).
   */
  take(thread: ThreadKey, maxBytes: number): KnownHistory | null {
    const known = this.#threads.get(thread.id);
    this.forget(thread.id);
    if (!known || known.workspaceId !== thread.workspaceId || known.bytes >= maxBytes) return null;
    return { threadId: thread.id, messages: known.messages };
  }
}

/** A thread's messages as known, and the thread they are of. */
export interface KnownHistory {
  threadId: string;
  messages: MessageRow[];
}

/** At most this many threads are known at once. */
export const MAX_THREADS = 1024;
/** A thread with more messages than this is not known. */
export const MAX_MESSAGES = 32;
/** A thread whose messages' content is more bytes than this (stored as JSON) is not known. */
export const MAX_BYTES = 16 * 1024;
/** At most this many bytes of content are known at once, across threads. */
export const MAX_TOTAL_BYTES = 1024 * 1024;

const encoder = new TextEncoder();
/** The bytes of a message's content as stored (its JSON): what a history read's bound counts. */
const contentBytes = (message: MessageRow) => encoder.encode(JSON.stringify(message.content)).length;

/**
 * A statement to ride with a run's write that fails its transaction, writing nothing, unless the
 * thread has exactly the known messages, in their order, and no run at all: the settings guard's
 * refusal (it inserts a second row with settings_generation's one id: isUniqueViolation(error,
 * GENERATION_MOVED)), since either means that the run is made again from what is read.
 */
export function historyGuard(known: KnownHistory): RawStatement {
  const ids = known.messages.map((message) => message.id);
  return {
    sql:
      'insert into "settings_generation" ("id", "value") select "id", "value" from "settings_generation" where "id" = 0 and (' +
      'exists (select 1 from "runs" where "thread_id" = ?) or ' +
      '(select count(*) from "messages" where "thread_id" = ?) is not ? or ' +
      `coalesce((select json_group_array("id") from (select "id" from "messages" where "thread_id" = ? order by "seq")), '[]') is not ?)`,
    args: [known.threadId, known.threadId, ids.length, known.threadId, JSON.stringify(ids)],
  };
}

const known = new WeakMap<Db, KnownHistories>();

/** The known histories of the threads written through `db`. */
export function knownHistories(db: Db): KnownHistories {
  let histories = known.get(db);
  if (!histories) known.set(db, (histories = new KnownHistories()));
  return histories;
}
