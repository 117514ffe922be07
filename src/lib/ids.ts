/**
 * Public identifiers. Assistants objects carry OpenAI-style ids (`asst_…`, `thread_…`, `run_…`,
 * `msg_…`, `step_…`, `call_…`, `vs_…`, `vsfb_…`, `file-…`): a prefix and 24 random alphanumerics (≈143 bits). Identities and
 * policies use UUIDs, as the policies API documents them.
 */

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

export type IdPrefix = 'asst' | 'thread' | 'run' | 'msg' | 'step' | 'call' | 'req' | 'file' | 'vs' | 'vsfb';

/** OpenAI's file ids are `file-…`, with a hyphen; every other id has an underscore. */
const SEPARATOR: Partial<Record<IdPrefix, string>> = { file: '-' };

export function newId(prefix: IdPrefix): string {
  // 248 is the largest multiple of 62 below 256: rejecting bytes above it keeps the draw uniform.
  const out: string[] = [];
  while (out.length < 24) {
    for (const byte of crypto.getRandomValues(new Uint8Array(32))) {
      if (byte < 248 && out.length < 24) out.push(ALPHABET[byte % 62]!);
    }
  }
  return `${prefix}${SEPARATOR[prefix] ?? '_'}${out.join('')}`;
}

export const newUuid = (): string => crypto.randomUUID();

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (value: string): boolean => UUID.test(value);
