import { expect } from 'vitest';

/**
 * A setup file of both test projects: `toEqual` on bytes (a Uint8Array, a Buffer, any typed array
 * against one of its own type) compares them at once instead of element by element, which took
 * vitest 11 s for one MiB on this machine. What equals is unchanged: the same type, the same length,
 * the same bytes; anything else goes to vitest's own comparison, which also prints the diff.
 */
function sameBytes(a: unknown, b: unknown): boolean | undefined {
  if (!ArrayBuffer.isView(a) || !ArrayBuffer.isView(b) || a instanceof DataView || b instanceof DataView)
    return undefined;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b) || a.byteLength !== b.byteLength) return undefined;
  const left = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const right = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  for (let i = 0; i < left.length; i++) if (left[i] !== right[i]) return undefined;
  return true;
}

// The node project's files share one worker's globals (isolate: false) and run this once each.
const registered = Symbol.for('assistants-gateway.test.sameBytes');
const scope = globalThis as { [registered]?: true };
if (!scope[registered]) {
  scope[registered] = true;
  expect.addEqualityTesters([sameBytes]);
}
