/**
 * Public identifiers. Assistants objects carry OpenAI-style ids (`asst_…`, `thread_…`, `run_…`,
 * a conversation's `conv_…` (a thread made by the Conversations API), a response's `resp_…`,
 * `msg_…`, `step_…`, `call_…`, `vs_…`, `vsfb_…`, `file-…`), and so does a stored chat completion
 * the provider gave no usable id (`chatcmpl-…`): a prefix and 24 alphanumerics, the
 * first 7 the time of creation, the other 17 random (≈101 bits). Identities and policies use
 * UUIDs, as the policies API documents them.
 *
 * The time comes first, in milliseconds, written in base 62 with digits in the order of their
 * character codes: ids sort by creation, so a new row's entries go where the last ones went in
 * every index that starts with an id (the primary keys, a thread's runs and messages), not to a
 * random page of it. A run writes a third of the database pages it wrote with all-random ids (21
 * KB of log instead of 66 KB on the benchmark's run). An id tells when it was made, as the
 * object's `created_at` does.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** The same characters in the order of their codes, for the time: ids compare as their times do. */
const ORDERED = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
/** 62^7 ms is about 111 years from 1970. */
const TIME_CHARS = 7;
const ID_CHARS = 24;

export type IdPrefix =
  | 'asst'
  | 'thread'
  | 'conv'
  | 'run'
  | 'resp'
  | 'msg'
  | 'step'
  | 'call'
  | 'req'
  | 'file'
  | 'vs'
  | 'vsfb'
  | 'chatcmpl'
  | 'cntr';

/** OpenAI's file and chat completion ids have a hyphen (`file-…`, `chatcmpl-…`); every other id has an underscore. */
const SEPARATOR: Partial<Record<IdPrefix, string>> = { file: '-', chatcmpl: '-' };

/**
 * Random bytes, drawn from the system's generator POOL_BYTES at a time (about 150 ids' worth)
 * rather than once per id: each draw is a call into the crypto library, which cost more than the
 * rest of making an id. Filled on first use, inside a request (Workers allow no random values at
 * start-up).
 */
const POOL_BYTES = 4096;
const pool = new Uint8Array(POOL_BYTES);
let used = POOL_BYTES;

/** The time part of ids made in the millisecond `ms` (the last one is kept: ids come in bursts). */
let stampedAt = -1;
let stamp = '';
function timeOf(ms: number): string {
  if (ms !== stampedAt) {
    stampedAt = ms;
    stamp = '';
    for (let rest = ms, i = 0; i < TIME_CHARS; i++, rest = Math.floor(rest / 62)) stamp = ORDERED[rest % 62] + stamp;
  }
  return stamp;
}

export function newId(prefix: IdPrefix): string {
  let id = `${prefix}${SEPARATOR[prefix] ?? '_'}${timeOf(Date.now())}`;
  // 248 is the largest multiple of 62 below 256: rejecting bytes above it keeps the draw uniform.
  for (let drawn = TIME_CHARS; drawn < ID_CHARS;) {
    if (used === POOL_BYTES) {
      crypto.getRandomValues(pool);
      used = 0;
    }
    // Past the pool (never: it is refilled first) reads as a byte the draw rejects.
    const byte = pool[used++] ?? 255;
    if (byte < 248) {
      id += ALPHABET[byte % 62];
      drawn++;
    }
  }
  return id;
}

export const newUuid = (): string => crypto.randomUUID();

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string): boolean => UUID.test(value);
