import { defined } from '../support/defined';
import fc from 'fast-check';
import { isUtf8 } from 'node:buffer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inspectJson, isStorableString, type JsonProblem } from '../../src/lib/strict-json';
import { MAX_BODY_DEPTH } from '../../src/http/middleware/json-body';
import { createTestGateway, errorOf, type Tenant, type TestGateway } from '../support/gateway';
import { recordTally } from '../support/tally';

/**
 * The strict reading of JSON bodies (lib/strict-json.ts, http/middleware/json-body.ts), generated:
 * inspectJson against a plain recursive oracle on what JSON.parse made of the same text, and the
 * API's answers to each kind of refused body.
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
let inputsTried = 0;

/** Strings that stress a scanner: quotes, backslashes, brackets, NUL, lone and paired surrogates. */
const trickyText = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }) },
    fc.constantFrom(
      '"',
      '\\',
      '{',
      '}',
      '[',
      ']',
      ',',
      ':',
      '\\"',
      '\0',
      '\ud800',
      '\udbff',
      '\udc00',
      '😀',
      '\u2028',
      'é',
      '__proto__',
    ),
  ),
  maxLength: 12,
});

const jsonish = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    trickyText,
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc
      .array(fc.tuple(trickyText, tie('value')), { maxLength: 4 })
      // defineProperty: a `__proto__` key is data, as JSON.parse makes it.
      .map((entries) =>
        entries.reduce<object>(
          (o, [k, v]) =>
            Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true }),
          {},
        ),
      ),
  ),
})).value;

/** The oracle's own definition of a storable string: no NUL, every surrogate paired. */
function isStorable(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit === 0) return false;
    if (unit >= 0xdc00 && unit <= 0xdfff) return false;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return false;
      i++;
    }
  }
  return true;
}

/** Every problem in a parsed value, found recursively: what inspectJson must pick one of. */
function problems(
  value: unknown,
  maxDepth: number,
  depth = 0,
  out = new Set<JsonProblem['kind']>(),
): Set<JsonProblem['kind']> {
  if (typeof value === 'string' && !isStorable(value)) out.add('bad_string');
  if (value === null || typeof value !== 'object') return out;
  if (depth + 1 > maxDepth) out.add('too_deep');
  for (const [key, child] of Object.entries(value)) {
    if (!Array.isArray(value)) {
      if (!isStorable(key)) out.add('bad_key');
      else if (key === '__proto__') out.add('proto_key');
    }
    problems(child, maxDepth, depth + 1, out);
  }
  return out;
}

const valueAt = (root: unknown, path: (string | number)[]) =>
  path.reduce<unknown>((node, part) => (node as Record<string | number, unknown>)?.[part], root);

describe('inspectJson, generated', () => {
  it('agrees with a recursive oracle on any JSON text, and points at the problem it names', () => {
    fc.assert(
      fc.property(
        jsonish,
        fc.integer({ min: 1, max: 6 }),
        fc.constantFrom(undefined, 0, 2, '\t'),
        (value, maxDepth, indent) => {
          inputsTried += 1;
          const text = JSON.stringify(value, null, indent);
          const parsed: unknown = JSON.parse(text);
          const expected = problems(parsed, maxDepth);
          const found = inspectJson(text, { maxDepth });
          if (found === null) {
            expect(expected).toEqual(new Set());
            return;
          }
          expect(expected).toContain(found.kind);
          const at = valueAt(parsed, found.path);
          switch (found.kind) {
            case 'bad_string':
              expect(typeof at === 'string' && !isStorable(at)).toBe(true);
              break;
            case 'too_deep':
              expect(found.path).toHaveLength(maxDepth);
              expect(typeof at).toBe('object');
              break;
            case 'proto_key':
              expect(Object.hasOwn(valueAt(parsed, found.path.slice(0, -1)) as object, '__proto__')).toBe(true);
              break;
            case 'bad_key':
              expect(Object.keys(at as object).some((key) => !isStorable(key))).toBe(true);
              break;
            case 'duplicate_key':
              throw new Error('JSON.stringify cannot write a key twice');
          }
          // Layout does not matter.
          expect(inspectJson(JSON.stringify(value), { maxDepth })?.kind).toBe(found.kind);
        },
      ),
      { numRuns: RUNS * 5 },
    );
  });

  it('finds a key written twice, however it is escaped and wherever it sits', () => {
    const key = fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 6 }).filter((k) => k !== '__proto__');
    /** The key as JSON: plain, or every character as a \u escape. */
    const spell = (k: string, escaped: boolean) =>
      escaped
        ? `"${[...k].map((ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"`
        : JSON.stringify(k);
    fc.assert(
      fc.property(
        fc.uniqueArray(key, { minLength: 1, maxLength: 5 }),
        fc.nat(),
        fc.boolean(),
        fc.array(fc.constantFrom('array', 'object'), { maxLength: 5 }),
        (keys, pick, escaped, wrappers) => {
          inputsTried += 1;
          const twice = defined(keys[pick % keys.length]);
          let text = `{${keys.map((k, i) => `${JSON.stringify(k)}:${i}`).join(',')},${spell(twice, escaped)}:"again"}`;
          const path: (string | number)[] = [];
          for (const wrapper of wrappers) {
            text = wrapper === 'array' ? `[0,${text}]` : `{"w":${text}}`;
            path.unshift(wrapper === 'array' ? 1 : 'w');
          }
          expect(inspectJson(text, { maxDepth: 64 })).toEqual({
            kind: 'duplicate_key',
            key: twice,
            path: [...path, twice],
          });
          // The same key in sibling objects is no duplicate.
          const siblings = `[${keys.map((k) => `{${JSON.stringify(k)}:1}`).join(',')},{${JSON.stringify(twice)}:2}]`;
          expect(inspectJson(siblings, { maxDepth: 64 })).toBeNull();
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('handles nesting far deeper than the stack would allow a recursive reader', () => {
    const depth = 200_000;
    expect(inspectJson('['.repeat(depth) + ']'.repeat(depth), { maxDepth: MAX_BODY_DEPTH })).toMatchObject({
      kind: 'too_deep',
    });
    expect(
      inspectJson('['.repeat(MAX_BODY_DEPTH) + ']'.repeat(MAX_BODY_DEPTH), { maxDepth: MAX_BODY_DEPTH }),
    ).toBeNull();
  });

  it('isStorableString agrees with the oracle', () => {
    fc.assert(
      fc.property(trickyText, (text) => {
        expect(isStorableString(text)).toBe(isStorable(text));
      }),
      { numRuns: RUNS },
    );
  });
});

// ── Through the API ──────────────────────────────────────────────────────────────────────────

let gateway: TestGateway;
let tenant: Tenant;
beforeAll(async () => {
  gateway = await createTestGateway();
  tenant = await gateway.tenant();
});
afterAll(async () => {
  recordTally('fuzz-json', { inputsTried });
  await gateway?.close();
});

const post = (body: string, key?: string) =>
  gateway.request('/v1/assistants', {
    key: key ?? tenant.workspaceKey,
    body,
    headers: { 'content-type': 'application/json' },
  });

/** An assistant whose metadata nests so that the whole body is `depth` levels deep. */
const nested = (depth: number) => `{"model":"m","metadata":${'{"a":'.repeat(depth - 1)}"x"${'}'.repeat(depth - 1)}}`;

describe('strict JSON bodies, through the API', () => {
  it.each([
    ['a key twice', '{"model":"a","model":"b"}', 'invalid_json', 'model', /more than once/],
    ['a key twice, once escaped', '{"model":"a","\\u006dodel":"b"}', 'invalid_json', 'model', /more than once/],
    [
      'a nested key twice',
      '{"model":"m","metadata":{"k":"1","k":"2"}}',
      'invalid_json',
      'metadata.k',
      /more than once/,
    ],
    ['__proto__', '{"model":"m","__proto__":{"x":1}}', 'invalid_json', '__proto__', /__proto__/],
    [
      '__proto__ in metadata',
      '{"model":"m","metadata":{"__proto__":"x"}}',
      'invalid_json',
      'metadata.__proto__',
      /__proto__/,
    ],
    ['NUL in a value', '{"model":"m","name":"a\\u0000b"}', 'invalid_value', 'name', /NUL/],
    ['a lone high surrogate', '{"model":"m","name":"\\ud800"}', 'invalid_value', 'name', /unpaired surrogate/],
    [
      'a lone low surrogate in an array',
      '{"model":"m","tools":[{"type":"code_interpreter"},"\\udc00"]}',
      'invalid_value',
      'tools[1]',
      /unpaired surrogate/,
    ],
    ['NUL in a key', '{"model":"m","metadata":{"a\\u0000":"x"}}', 'invalid_json', 'metadata', /NUL/],
    [
      'nesting deeper than 64',
      nested(MAX_BODY_DEPTH + 1),
      'invalid_json',
      expect.stringMatching(/^metadata(\.a)+$/),
      /deeper than 64/,
    ],
  ])('refuses %s with 400 naming where', async (_name, body, code, param, message) => {
    inputsTried += 1;
    const error = await errorOf(await post(body));
    expect(error).toMatchObject({ status: 400, code, param });
    expect(error.message).toMatch(message);
  });

  it('accepts a paired surrogate (an emoji as escapes) and nesting of exactly 64 levels', async () => {
    expect((await post('{"model":"m","name":"\\ud83d\\ude00"}')).status).toBe(200);
    // 64 levels are no valid assistant, but the reader lets them through to the schema.
    const error = await errorOf(await post(nested(MAX_BODY_DEPTH)));
    expect(error.message).not.toMatch(/deeper/);
  });

  it('refuses before authenticating: a bad body tells nothing about the key', async () => {
    const error = await errorOf(await post('{"a":1,"a":2}', 'gk_not-a-key'));
    expect(error).toMatchObject({ status: 400, code: 'invalid_json' });
  });

  const postBytes = (bytes: Uint8Array) =>
    gateway.app.request('/v1/assistants', {
      method: 'POST',
      headers: { 'x-gateway-api-key': tenant.workspaceKey, 'content-type': 'application/json' },
      body: bytes,
    });
  const bytesOf = (...parts: (string | number[])[]) =>
    Uint8Array.from(parts.flatMap((part) => (typeof part === 'string' ? [...new TextEncoder().encode(part)] : part)));
  const assistantCount = async () =>
    (
      (await (await gateway.request('/v1/assistants?limit=100', { key: tenant.workspaceKey })).json()) as {
        data: unknown[];
      }
    ).data.length;

  it.each([
    ['two bytes that begin no character', [0xff, 0xfe]],
    ['a lone continuation byte', [0x80]],
    ['an overlong "/"', [0xc0, 0xaf]],
    ['a sequence cut short', [0xe2, 0x82]],
    ['a surrogate encoded as UTF-8', [0xed, 0xa0, 0x80]],
    ['a code point past U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
  ])('refuses a body with %s: 400, never stored with U+FFFD', async (_name, bad) => {
    inputsTried += 1;
    const before = await assistantCount();
    const error = await errorOf(await postBytes(bytesOf('{"model":"gpt-', bad, '4o"}')));
    expect(error).toMatchObject({
      status: 400,
      code: 'invalid_json',
      param: null,
      message: 'The request body is not valid UTF-8.',
    });
    expect(await assistantCount()).toBe(before);
  });

  it('skips a leading byte order mark, and only a leading one', async () => {
    const created = await postBytes(bytesOf([0xef, 0xbb, 0xbf], '{"model":"m","name":"bom"}'));
    expect(created.status).toBe(200);
    expect(await created.json()).toMatchObject({ model: 'm', name: 'bom' });
    expect((await postBytes(bytesOf('{"model":"m","name":"', [0xef, 0xbb, 0xbf], '"}'))).status).toBe(200);
    expect(
      await errorOf(await postBytes(bytesOf([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf], '{"model":"m"}'))),
    ).toMatchObject({ status: 400, code: 'invalid_json' });
  });

  it('refuses a name of any bytes exactly when they are not UTF-8, and stores what was sent when they are', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc
          .uint8Array({ maxLength: 12 })
          .filter((bytes) => !bytes.includes(0x22) && !bytes.includes(0x5c) && bytes.every((b) => b >= 0x20)),
        async (name) => {
          inputsTried += 1;
          const response = await postBytes(bytesOf('{"model":"m","name":"', [...name], '"}'));
          if (isUtf8(name)) {
            expect(response.status).toBe(200);
            expect(((await response.json()) as { name: string }).name).toBe(Buffer.from(name).toString('utf8'));
          } else {
            expect(await errorOf(response)).toMatchObject({
              status: 400,
              message: 'The request body is not valid UTF-8.',
            });
          }
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('does not repeat a refused value back', async () => {
    const secretish = 'sk-live-should-not-be-echoed';
    for (const body of [`{"model":"${secretish}","model":"x"}`, `{"model":"m","name":"${secretish}\\u0000"}`]) {
      const text = await (await post(body)).text();
      expect(text).toContain('invalid_');
      expect(text).not.toContain(secretish);
    }
  });
});
