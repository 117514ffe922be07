/**
 * Public identifiers. Assistants objects carry OpenAI-style ids (`asst_…`, `thread_…`, `run_…`,
 * `msg_…`, `step_…`, `call_…`, `vs_…`, `vsfb_…`, `file-…`): a prefix and 24 random alphanumerics (≈143 bits). Identities and
 * policies use UUIDs, as the policies API documents them.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

export type IdPrefix = 'asst' | 'thread' | 'run' | 'msg' | 'step' | 'call' | 'req' | 'file' | 'vs' | 'vsfb';

/** OpenAI's file ids are `file-…`, with a hyphen; every other id has an underscore. */
const SEPARATOR: Partial<Record<IdPrefix, string>> = { file: '-' };

/**
 * Random bytes, drawn from the system's generator POOL_BYTES at a time (about 150 ids' worth)
 * rather than once per id: each draw is a call into the crypto library, which cost more than the
 * rest of making an id. Filled on first use, inside a request (Workers allow no random values at
 * start-up).
 */
const POOL_BYTES = 4096;
const pool = new Uint8Array(POOL_BYTES);
let used = POOL_BYTES;

export function newId(prefix: IdPrefix): string {
  let id = `${prefix}${SEPARATOR[prefix] ?? '_'}`;
  // 248 is the largest multiple of 62 below 256: rejecting bytes above it keeps the draw uniform.
  for (let drawn = 0; drawn < 24; ) {
    if (used === POOL_BYTES) {
      crypto.getRandomValues(pool);
      used = 0;
    }
    const byte = pool[used++]!;
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
