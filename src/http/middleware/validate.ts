import { zValidator } from '@hono/zod-validator';
import type { Env, MiddlewareHandler, ValidationTargets } from 'hono';
import type * as z from 'zod';
import { ApiError, type ErrorCode } from '../../errors';

/**
 * Each validating middleware, with what it validates: the OpenAPI document is generated from
 * these (http/openapi/generate.ts), so it describes every route's input with the schema that checks it.
 */
export const validatedInputs = new WeakMap<object, { target: keyof ValidationTargets; schema: z.ZodType }>();

/**
 * The only way routes validate input: @hono/zod-validator with a hook that turns the first zod
 * issue into an `ApiError` naming the field (`param`), in OpenAI's wording where it has one.
 */
export const validate = <Target extends keyof ValidationTargets, Schema extends z.ZodType>(
  target: Target,
  schema: Schema,
) => {
  // Given to zValidator as any zod schema, so that the parse below meets its option's type (a
  // conditional type TypeScript cannot resolve for a generic schema); the routes read
  // `c.req.valid(target)` as this schema's output, which the parse produces.
  const anySchema: z.ZodType = schema;
  const middleware: MiddlewareHandler<Env, string, ValidatedInput<Target, Schema>> = zValidator(
    target,
    anySchema,
    (result) => {
      if (!result.success) throw validationError(result.error.issues, result.data, target);
    },
    // Synchronously: no schema of ours refines or transforms asynchronously, and the validator's
    // default (`safeParseAsync`) costs several times the parse on a small body and keeps zod from
    // its compiled fast path for objects (taken where the runtime allows code generation: Node,
    // not Workers). A schema that turned asynchronous would throw here, in every test of its route.
    { validationFunction: (parsed, value) => parsed.safeParse(value) },
  );
  validatedInputs.set(middleware, { target, schema });
  return middleware;
};

/** What a validating middleware takes (the target's raw value) and gives its route (`c.req.valid(target)`). */
type ValidatedInput<Target extends keyof ValidationTargets, Schema extends z.ZodType> = {
  in: { [K in Target]?: ValidationTargets[K] };
  out: { [K in Target]: z.output<Schema> };
};

type Issue = z.core.$ZodIssue;

/** Builds the error for the first issue. `input` is the value that was validated. */
export function validationError(issues: readonly Issue[], input: unknown, target: string): ApiError {
  const issue = issues[0];
  if (!issue) return new ApiError('invalid_value', 'The request is invalid.');
  return describe(issue, [], input, target);
}

function describe(issue: Issue, prefix: PropertyKey[], input: unknown, target: string): ApiError {
  const path = [...prefix, ...issue.path];
  const param = formatPath(path, target);
  const name = param === null ? describeRoot(target) : `'${param}'`;
  const at = (code: ErrorCode, message: string, paramOverride: string | null = param) =>
    new ApiError(code, message, { param: paramOverride });

  // A value that is absent fails its type, enum or union check: say that it is missing.
  const absentCodes = ['invalid_type', 'invalid_value', 'invalid_union'];
  if (absentCodes.includes(issue.code) && valueAt(input, path) === undefined) {
    if (param === null) return at('invalid_json', 'The request body must be a JSON object.');
    return at('missing_required_parameter', `Missing required parameter: '${param}'.`);
  }

  switch (issue.code) {
    case 'invalid_type': {
      const received = valueAt(input, path);
      return at(
        'invalid_type',
        `Invalid type for ${name}: expected ${article(issue.expected)}, but got ${typeName(received)} instead.`,
      );
    }
    case 'too_big': {
      const limit = Number(issue.maximum);
      if (issue.origin === 'string') {
        return at('string_above_max_length', `Invalid ${name}: string too long. Expected at most ${limit} characters.`);
      }
      if (issue.origin === 'array' || issue.origin === 'set') {
        return at('array_above_max_length', `Invalid ${name}: array too long. Expected at most ${limit} items.`);
      }
      if (issue.origin === 'object' || issue.origin === 'record') {
        return at('array_above_max_length', `Invalid ${name}: too many entries. Expected at most ${limit}.`);
      }
      const bound = issue.inclusive === false ? '<' : '<=';
      return at('value_above_maximum', `Invalid ${name}: expected a value ${bound} ${limit}.`);
    }
    case 'too_small': {
      const limit = Number(issue.minimum);
      if (issue.origin === 'string') {
        if (limit === 1) return at('string_below_min_length', `Invalid ${name}: expected a non-empty string.`);
        return at(
          'string_below_min_length',
          `Invalid ${name}: string too short. Expected at least ${limit} characters.`,
        );
      }
      if (issue.origin === 'array' || issue.origin === 'set') {
        return at(
          'array_below_min_length',
          `Invalid ${name}: expected at least ${limit} item${limit === 1 ? '' : 's'}.`,
        );
      }
      const bound = issue.inclusive === false ? '>' : '>=';
      return at('value_below_minimum', `Invalid ${name}: expected a value ${bound} ${limit}.`);
    }
    case 'invalid_value':
      return at(
        'invalid_value',
        `Invalid value for ${name}: expected ${issue.values.length === 1 ? '' : 'one of '}${issue.values
          .map((value) => JSON.stringify(value))
          .join(', ')}.`,
      );
    case 'invalid_format':
      if (issue.format === 'regex') return at('invalid_value', `Invalid ${name}: ${issue.message}`);
      return at('invalid_value', `Invalid ${name}: expected ${article(issue.format)}.`);
    case 'not_multiple_of':
      return at('invalid_value', `Invalid ${name}: expected a multiple of ${Number(issue.divisor)}.`);
    case 'unrecognized_keys': {
      const keyParam = formatPath([...path, ...issue.keys.slice(0, 1)], target);
      const noun = target === 'query' ? 'query parameter' : 'request argument';
      return at('unknown_parameter', `Unrecognized ${noun} supplied: '${keyParam}'.`, keyParam);
    }
    case 'invalid_union': {
      if (issue.discriminator !== undefined && issue.errors.length === 0) {
        // zod puts the discriminator at the end of the path already.
        const keyPath = path.at(-1) === issue.discriminator ? path : [...path, issue.discriminator];
        const keyParam = formatPath(keyPath, target);
        const value = valueAt(input, keyPath);
        const message =
          value === undefined
            ? `Missing required parameter: '${keyParam}'.`
            : `Invalid value for '${keyParam}': ${JSON.stringify(value)} is not supported.`;
        return at(value === undefined ? 'missing_required_parameter' : 'invalid_value', message, keyParam);
      }
      // Report the branch that got furthest: its first issue is the most specific explanation. A
      // branch whose type matched the value (its issue is not the type) got further than the others.
      const wrongType = (first: Issue) => (first.path.length === 0 && first.code === 'invalid_type' ? 1 : 0);
      const best = issue.errors
        .map((branch) => branch[0])
        .filter((first): first is Issue => first !== undefined)
        .sort((a, b) => b.path.length - a.path.length || wrongType(a) - wrongType(b))[0];
      if (best && (best.path.length > 0 || wrongType(best) === 0)) return describe(best, path, input, target);
      return at('invalid_value', `Invalid value for ${name}.`);
    }
    case 'invalid_key': {
      // The path ends with the offending key: name the record, and the key in the message.
      const recordPath = path.slice(0, -1);
      const recordParam = formatPath(recordPath, target);
      const key = String(path.at(-1)).slice(0, 32);
      const inner = issue.issues[0];
      const code = inner?.code === 'too_big' ? 'string_above_max_length' : 'invalid_value';
      const detail = inner?.code === 'too_big' ? `longer than ${Number(inner.maximum)} characters` : 'not allowed';
      return at(
        code,
        `Invalid ${recordParam === null ? 'request' : `'${recordParam}'`}: the key '${key}' is ${detail}.`,
        recordParam,
      );
    }
    case 'invalid_element': {
      const inner = issue.issues[0];
      if (inner) return describe(inner, path, input, target);
      return at('invalid_value', `Invalid ${name}.`);
    }
    case 'custom': {
      const code = (issue.params?.code as ErrorCode | undefined) ?? 'invalid_value';
      return at(code, issue.message);
    }
  }
}

/** `thread.messages[0].role`, as OpenAI names nested parameters; null for the whole body. */
export function formatPath(path: readonly PropertyKey[], target: string): string | null {
  if (path.length === 0) return null;
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return target === 'header' ? out.toLowerCase() : out;
}

function describeRoot(target: string): string {
  return target === 'json' ? 'the request body' : `the ${target}`;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let current = input;
  for (const part of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PropertyKey, unknown>)[part];
  }
  return current;
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number' && Number.isInteger(value)) return 'an integer';
  if (typeof value === 'number') return 'a decimal';
  return article(typeof value);
}

function article(noun: string): string {
  if (noun === 'int') return 'an integer';
  if (noun === 'null' || noun === 'undefined') return noun;
  return /^[aeiou]/i.test(noun) ? `an ${noun}` : `a ${noun}`;
}
