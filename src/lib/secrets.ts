import { fromBase64Url, toBase64Url } from './crypto';
import { BoundedMap } from './bounded-map';

/**
 * Provider secrets at rest: AES-256-GCM through WebCrypto, so Node and Workers share the code.
 *
 * A ciphertext is one string, `v1.<iv>.<ciphertext and tag>` (base64url), so the algorithm can
 * change later without guessing what a stored value is. Every call binds associated data (the
 * virtual key's id): GCM then refuses a ciphertext copied from one row onto another, even under
 * the same key.
 *
 * A box may hold a previous key besides its current one, while the key is rotated (docs/operations.md):
 * it opens secrets sealed under either and seals under the current one alone; `reseal` moves a
 * secret from the previous key to the current one.
 */

const VERSION = 'v1';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const ALGORITHM = 'AES-GCM';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

// The global `CryptoKey` type is in neither lib.es2023 nor @types/node 20; this is the same type.
type AesKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

/** Secrets kept decrypted: one per live virtual key is enough; the bound only caps memory. */
const MAX_OPENED = 1024;

export class SecretBox {
  /** The current key, then the previous one if the key is being rotated. */
  readonly #keys: readonly [AesKey, ...AesKey[]];
  /**
   * Decrypted secrets by record and ciphertext. Every run would otherwise decrypt its provider key
   * (a WebCrypto call through a thread pool); the ciphertext carries a random IV, so a re-encrypted
   * or replaced secret is a new entry, never a stale one.
   */
  readonly #opened = new BoundedMap<string, string>(MAX_OPENED);

  private constructor(keys: readonly [AesKey, ...AesKey[]]) {
    this.#keys = keys;
  }

  /**
   * A box over a 32-byte key in base64 or base64url, padded or not (surrounding whitespace, such as
   * a key file's final newline, is ignored), and the key it replaces, if any. The message never
   * repeats a key.
   */
  static async fromBase64(text: string, previous?: string): Promise<SecretBox> {
    const current = await importKey(text);
    return new SecretBox(previous === undefined ? [current] : [current, await importKey(previous)]);
  }

  /** Whether the box holds a previous key: whether `reseal` can move anything. */
  get rotating(): boolean {
    return this.#keys.length > 1;
  }

  async encrypt(plaintext: string, associatedData: string): Promise<string> {
    const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
    const sealed = await crypto.subtle.encrypt(
      { name: ALGORITHM, iv, additionalData: encoder.encode(associatedData) },
      this.#keys[0],
      encoder.encode(plaintext),
    );
    return `${VERSION}.${toBase64Url(iv)}.${toBase64Url(new Uint8Array(sealed))}`;
  }

  /** Throws when the ciphertext was altered, sealed for other associated data or under another key. */
  async decrypt(ciphertext: string, associatedData: string): Promise<string> {
    const cacheKey = `${associatedData}\u0000${ciphertext}`;
    const cached = this.#opened.get(cacheKey);
    if (cached !== undefined) return cached;
    const plaintext = await this.#decrypt(ciphertext, associatedData);
    this.#opened.set(cacheKey, plaintext);
    return plaintext;
  }

  /**
   * The secret sealed again under the current key if it is sealed under the previous one; null if
   * it is sealed under the current key already. Throws as `decrypt` does when neither opens it.
   */
  async reseal(ciphertext: string, associatedData: string): Promise<string | null> {
    const { plaintext, key } = await this.#open(ciphertext, associatedData);
    return key === 0 ? null : this.encrypt(plaintext, associatedData);
  }

  async #decrypt(ciphertext: string, associatedData: string): Promise<string> {
    return (await this.#open(ciphertext, associatedData)).plaintext;
  }

  /** The plaintext, and which key opened it: 0 the current one, 1 the previous one. */
  async #open(ciphertext: string, associatedData: string): Promise<{ plaintext: string; key: number }> {
    const [version, iv, sealed, ...rest] = ciphertext.split('.');
    if (version !== VERSION || !iv || !sealed || rest.length > 0) {
      throw new Error(`Cannot decrypt: not a '${VERSION}' secret.`);
    }
    const parameters = { name: ALGORITHM, iv: fromBase64Url(iv), additionalData: encoder.encode(associatedData) };
    const bytes = fromBase64Url(sealed);
    let failure: unknown;
    for (const [index, key] of this.#keys.entries()) {
      try {
        return { plaintext: decoder.decode(await crypto.subtle.decrypt(parameters, key, bytes)), key: index };
      } catch (cause) {
        failure = cause;
      }
    }
    throw new Error(
      'Cannot decrypt: the secret was altered, belongs to another record, or was encrypted under another key.',
      { cause: failure },
    );
  }
}

/** Why SecretBox.fromBase64 would refuse `text`, or null if it takes it; imports nothing. */
export function keyTextProblem(text: string): string | null {
  try {
    decodeKey(text.trim());
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

function importKey(text: string): Promise<AesKey> {
  return crypto.subtle.importKey('raw', decodeKey(text.trim()), ALGORITHM, false, ['encrypt', 'decrypt']);
}

/** A new random key in standard base64 (what `openssl rand -base64 32` prints). */
export function generateKeyBase64(): string {
  return btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(KEY_BYTES))));
}

function decodeKey(text: string): Uint8Array<ArrayBuffer> {
  const usage = `The encryption key must be ${KEY_BYTES} random bytes in base64 (generate one with \`openssl rand -base64 32\`)`;
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) throw new Error(`${usage}; it contains other characters.`);
  let bytes: Uint8Array;
  try {
    bytes = fromBase64Url(text.replace(/=+$/, ''));
  } catch {
    throw new Error(`${usage}; it is not valid base64.`);
  }
  if (bytes.length !== KEY_BYTES) throw new Error(`${usage}; it decodes to ${bytes.length} bytes.`);
  return new Uint8Array(bytes);
}
