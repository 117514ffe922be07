import { defined } from './defined';
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Ajv2019, type ErrorObject, type ValidateFunction } from 'ajv/dist/2019';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

/**
 * OpenAI's own descriptions of the Assistants, Chat Completions, Responses and Conversations APIs
 * (test/fixtures/README.md says where they come from) as a validator: does a value the gateway
 * sends have the shape of the component OpenAI names for it?
 *
 *   componentErrors('RunObject', body)         → [] or readable failures, one a line
 *   responseComponent('getRun')                → 'RunObject' (the 200 body of that operation)
 *   streamEventErrors('thread.message.delta', data)  (one event of a run's stream)
 *   responseStreamEventErrors('response.output_text.delta', data)  (one event of a response's)
 *
 * The documents are OpenAPI 3.1 in name but mix in OpenAPI 3.0's `nullable`, which JSON Schema
 * does not know; each schema is rewritten into plain JSON Schema (draft 2019-09, what Ajv2019
 * validates, `$recursiveRef` included) before Ajv sees it:
 *
 * - `nullable: true` beside anything (`type`, `$ref`, `anyOf`, `enum`) means "that, or null":
 *   `{anyOf: [{type: 'null'}, <the rest>]}`; `allOf: [X, {nullable: true}]`, OpenAI's way of
 *   making a `$ref` nullable, is "X or null".
 * - The Responses document writes "or null" as JSON Schema does (`anyOf: [X, {type: 'null'}]`),
 *   which needs no rewriting.
 * - A union with a `discriminator` whose branches each require their own values of it becomes
 *   an `if`/`then` per branch (discriminatedUnion): a value is checked against the branch its
 *   `type` names, and a failure is reported as that branch sees it, not as fifty branches do.
 * - Strict about properties: an object schema that lists `properties` and says nothing of
 *   `additionalProperties` admits no other property (`unevaluatedProperties: false`). OpenAI's
 *   SDKs type exactly the documented fields, so a field the gateway adds is one no client reads
 *   and a divergence that no test would otherwise notice; an object that documents itself open
 *   (`metadata`, a function's `parameters`) stays open. The only exceptions are the fields the
 *   live API sends beyond its description (`fieldsOpenAiSendsUndocumented`).
 * - The vendor keywords (`x-oaiMeta`, `x-stainless-const`, `example`, `discriminator`...) are
 *   annotations; any other unknown keyword fails loudly (Ajv's strict mode), so that a schema
 *   this file does not understand is never skipped in silence.
 */

const FIXTURES = new URL('../fixtures/', import.meta.url);
const DOCUMENTS = [
  'openai-assistants-files-vector-stores-openapi.yaml',
  'openai-assistants-v2-schemas.yaml',
  'openai-chat-embeddings-models-openapi.yaml',
  'openai-responses-conversations-openapi.yaml',
];
const SCHEMA_ID = 'openai-assistants';
const COMPONENT_REF = '#/components/schemas/';
const RESPONSE_REF = '#/components/responses/';
/** The suffix of a component's open variant (toJsonSchema). */
const OPEN = '__open';
const ANNOTATIONS = [
  'example',
  'discriminator',
  'x-oaiMeta',
  'x-oaiTypeLabel',
  'x-oaiExpandable',
  'x-oaiSupportedSDKs',
  'x-stainless-const',
  'x-stainless-skip',
];

type Schema = Record<string, unknown>;
type Answer = { $ref?: string; content?: Record<string, { schema?: { $ref?: string } }> };
type Document = {
  paths?: Record<string, Record<string, { operationId?: string; responses?: Record<string, Answer> }>>;
  components: { schemas: Record<string, Schema>; responses?: Record<string, Answer> };
};

const documents = DOCUMENTS.map((name) => parse(readFileSync(new URL(name, FIXTURES), 'utf8')) as Document);

/** Every component schema of both documents; a name the two share must mean the same schema. */
const components: Record<string, Schema> = {};
for (const document of documents) {
  for (const [name, schema] of Object.entries(document.components.schemas)) {
    if (name in components && !isDeepStrictEqual(components[name], schema)) {
      throw new Error(`openapi.ts: the fixtures disagree on the component ${name}`);
    }
    components[name] = schema;
  }
}

/**
 * Fields OpenAI's live API sends that its description leaves out, and the gateway sends too: a
 * client written against the live API may read them. Each is in the live stream captured in
 * test/fixtures/openai-run-stream-example.txt (test/support/openapi.test.ts checks that it is there), and
 * is typed as the description types the same field elsewhere.
 */
export const fieldsOpenAiSendsUndocumented: Readonly<Record<string, Record<string, Schema>>> = {
  RunObject: {
    tool_resources: defined((defined(components.AssistantObject).properties as Record<string, Schema>).tool_resources),
  },
  RunStepObject: { expires_at: { anyOf: [{ type: 'integer', format: 'unixtime' }, { type: 'null' }] } },
};
for (const [name, fields] of Object.entries(fieldsOpenAiSendsUndocumented)) {
  const schema = defined(components[name]);
  components[name] = { ...schema, properties: { ...(schema.properties as Record<string, Schema>), ...fields } };
}

/**
 * Documented fields that OpenAI's API sends as null although the description types them without
 * null, and that its SDKs type as optional (`expires_at?: number`, `status_details?: string`):
 * a File without an expiry, and the deprecated `status_details` of every File.
 */
export const fieldsOpenAiSendsNull: Readonly<Record<string, readonly string[]>> = {
  OpenAIFile: ['expires_at', 'status_details'],
};
for (const [name, fields] of Object.entries(fieldsOpenAiSendsNull)) {
  const schema = defined(components[name]);
  const properties = { ...(schema.properties as Record<string, Schema>) };
  for (const field of fields) properties[field] = { ...properties[field], nullable: true };
  components[name] = { ...schema, properties };
}

const ajv = new Ajv2019({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
addFormats(ajv);
ajv.addVocabulary(ANNOTATIONS);
// OpenAI's own formats: a Unix timestamp in seconds, a 64-bit integer, a file's bytes, a score.
ajv.addFormat('unixtime', { type: 'number', validate: (value: number) => Number.isInteger(value) && value >= 0 });
ajv.addFormat('int64', { type: 'number', validate: (value: number) => Number.isSafeInteger(value) });
ajv.addFormat('binary', true);
ajv.addFormat('float', { type: 'number', validate: Number.isFinite });
ajv.addSchema({
  $id: SCHEMA_ID,
  $defs: Object.fromEntries(
    Object.entries(components).flatMap(([name, schema]) => [
      [name, toJsonSchema(schema, name)],
      [`${name}${OPEN}`, toJsonSchema(schema, name, true)],
    ]),
  ),
});

/**
 * OpenAPI's schema dialect into draft 2019-09, as the header comment says. `open`: the schema is
 * one member of an allOf of several, whose properties the allOf's own schema closes (a member
 * closed by itself would refuse its siblings' properties); a component it names is its open
 * variant (`<name>${OPEN}`).
 */
function toJsonSchema(node: unknown, at: string, open = false): unknown {
  if (Array.isArray(node)) return node.map((item, i) => toJsonSchema(item, `${at}/${i}`));
  if (typeof node !== 'object' || node === null) return node;
  const schema: Schema = {};
  let nullable = false;
  let closesMembers = false;
  for (const [key, value] of Object.entries(node)) {
    if (key === 'nullable') {
      nullable = value === true;
    } else if (key === '$ref' && typeof value === 'string') {
      if (!value.startsWith(COMPONENT_REF)) throw new Error(`openapi.ts: ${at}: unexpected $ref ${value}`);
      schema.$ref = `#/$defs/${value.slice(COMPONENT_REF.length)}${open ? OPEN : ''}`;
    } else if (key === 'allOf' && Array.isArray(value)) {
      const members = value.filter((member) => !isDeepStrictEqual(member, { nullable: true }));
      if (members.length < value.length) nullable = true;
      if (members.length === 1) schema.allOf = [toJsonSchema(members[0], `${at}/allOf/0`)];
      if (members.length > 1) {
        schema.allOf = members.map((member, i) => toJsonSchema(member, `${at}/allOf/${i}`, true));
        closesMembers = !members.some(declaresOpen);
      }
    } else if ((key === 'oneOf' || key === 'anyOf') && Array.isArray(value)) {
      const union = discriminatedUnion(node as Schema, value, `${at}/${key}`);
      if (union) schema.allOf = union;
      else schema[key] = toJsonSchema(value, `${at}/${key}`);
    } else if (key === 'properties' || key === 'patternProperties') {
      // Maps of names to schemas: the names are not keywords.
      schema[key] = Object.fromEntries(
        Object.entries(value as Schema).map(([name, sub]) => [name, toJsonSchema(sub, `${at}/${key}/${name}`)]),
      );
    } else if (ANNOTATIONS.includes(key) || ['default', 'enum', 'const', 'examples', 'required'].includes(key)) {
      schema[key] = value;
    } else {
      schema[key] = toJsonSchema(value, `${at}/${key}`);
    }
  }
  const closed = (schema.properties !== undefined && !('additionalProperties' in schema)) || closesMembers;
  if (closed && !open) schema.unevaluatedProperties = false;
  if (!nullable) return schema;
  // The constraints move into the non-null branch; the annotations stay outside.
  const outside: Schema = {};
  for (const key of ['description', 'title', 'default']) {
    if (key in schema) {
      outside[key] = schema[key];
      delete schema[key];
    }
  }
  return { ...outside, anyOf: [{ type: 'null' }, schema] };
}

/**
 * A union with a `discriminator` whose branches each require the discriminating property with
 * values of their own, as one check of that property and one `if` (this value) / `then` (this
 * branch) per branch: the same values pass as with oneOf or anyOf, and a value that fails is
 * told what is wrong with it as its own branch says, instead of every branch's complaint. A
 * union whose branches cannot be told apart that way (a branch with no such property, or an
 * optional one, or a value two branches share) stays as it is.
 */
function discriminatedUnion(node: Schema, branches: unknown[], at: string): Schema[] | undefined {
  const name = (node.discriminator as { propertyName?: unknown } | undefined)?.propertyName;
  if (typeof name !== 'string') return undefined;
  const values = branches.map((branch) => discriminatorValues(branch, name));
  const all = values.flatMap((list) => list ?? []);
  if (values.some((list) => list === undefined) || new Set(all).size !== all.length) return undefined;
  return [
    { required: [name], properties: { [name]: { enum: all } } },
    ...branches.map((branch, i) => ({
      if: { required: [name], properties: { [name]: { enum: values[i] } } },
      then: toJsonSchema(branch, `${at}/${i}`),
    })),
  ];
}

/** The values a branch requires of its discriminating property (through `$ref` and `allOf`). */
function discriminatorValues(branch: unknown, name: string): unknown[] | undefined {
  if (typeof branch !== 'object' || branch === null) return undefined;
  const ref = (branch as Schema).$ref;
  const schema = typeof ref === 'string' ? components[ref.slice(COMPONENT_REF.length)] : (branch as Schema);
  if (schema === undefined) return undefined;
  if (Array.isArray(schema.allOf)) {
    const found = schema.allOf.map((member) => discriminatorValues(member, name)).filter((list) => list !== undefined);
    return found.length === 1 ? found[0] : undefined;
  }
  const property = (schema.properties as Record<string, Schema> | undefined)?.[name];
  const required = Array.isArray(schema.required) && schema.required.includes(name);
  if (!property || !required) return undefined;
  if (Array.isArray(property.enum)) return property.enum;
  return 'const' in property ? [property.const] : undefined;
}

/** Whether a member of an allOf says that it takes other properties (itself, or the component it names). */
function declaresOpen(member: unknown): boolean {
  if (typeof member !== 'object' || member === null) return false;
  const ref = (member as Schema).$ref;
  const schema = typeof ref === 'string' ? components[ref.slice(COMPONENT_REF.length)] : (member as Schema);
  return schema !== undefined && 'additionalProperties' in schema;
}

const validators = new Map<string, ValidateFunction>();

function validator(pointer: string): ValidateFunction {
  let validate = validators.get(pointer);
  if (!validate) {
    validate = ajv.getSchema(`${SCHEMA_ID}${pointer}`);
    if (!validate) throw new Error(`openapi.ts: no schema at ${pointer}`);
    validators.set(pointer, validate);
  }
  return validate;
}

/** The names of the components the fixtures describe. */
export const componentNames: readonly string[] = Object.keys(components).sort();

/**
 * Why `value` is not a `name` (a component of the fixtures, e.g. `RunObject`): one readable line
 * per failure, `/path/in/value: what is wrong (the value there)`; empty when it is one.
 */
export function componentErrors(name: string, value: unknown): string[] {
  if (!(name in components))
    throw new Error(`openapi.ts: no component named ${name}; known: ${componentNames.join(', ')}`);
  return errorsOf(validator(`#/$defs/${name}`), value);
}

function errorsOf(validate: ValidateFunction, value: unknown): string[] {
  if (validate(value)) return [];
  const errors = validate.errors ?? [];
  // A value that fails a nullable field fails its `null` branch too, and the anyOf that joins
  // them: those say nothing when a more precise failure at or below the same place does.
  const precise = errors.filter((error) => !isBranchNoise(error));
  const shown = errors.filter(
    (error) =>
      !isBranchNoise(error) ||
      !precise.some(
        (other) => other.instancePath === error.instancePath || other.instancePath.startsWith(`${error.instancePath}/`),
      ),
  );
  return [...new Set(shown.map((error) => explain(error, value)))];
}

function isBranchNoise(error: ErrorObject): boolean {
  // `if`: a discriminated union's branch failed (discriminatedUnion), whose own failures say why.
  if (error.keyword === 'anyOf' || error.keyword === 'oneOf' || error.keyword === 'if') return true;
  return error.keyword === 'type' && (error.params as { type?: unknown }).type === 'null';
}

function explain(error: ErrorObject, root: unknown): string {
  const path = error.instancePath || '/';
  const params = error.params as Record<string, unknown>;
  let detail = error.message ?? error.keyword;
  if (error.keyword === 'unevaluatedProperties')
    detail = `has the undocumented property '${String(params.unevaluatedProperty)}'`;
  if (error.keyword === 'additionalProperties')
    detail = `has the undocumented property '${String(params.additionalProperty)}'`;
  if (error.keyword === 'enum') detail = `must be one of ${JSON.stringify(params.allowedValues)}`;
  return `${path}: ${detail} (got ${preview(at(root, error.instancePath))}; schema ${error.schemaPath.replace(/^.*#\/\$defs\//, '')})`;
}

function at(root: unknown, pointer: string): unknown {
  let value = root;
  for (const part of pointer.split('/').slice(1)) {
    const key = part.replace(/~1/g, '/').replace(/~0/g, '~');
    value = typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
  }
  return value;
}

function preview(value: unknown): string {
  const text = JSON.stringify(value) ?? 'undefined';
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

// ── Operations ──────────────────────────────────────────────────────────────────────────────

/**
 * The component OpenAI names for an operation's answer with this status (by the reference's
 * operationId, e.g. `getRun`; a shared answer such as 429's TooManyRequests is followed).
 */
export function responseComponent(operationId: string, status = '200'): string {
  for (const document of documents) {
    for (const operations of Object.values(document.paths ?? {})) {
      for (const operation of Object.values(operations)) {
        if (operation.operationId !== operationId) continue;
        let answer = operation.responses?.[status];
        if (answer?.$ref?.startsWith(RESPONSE_REF))
          answer = document.components.responses?.[answer.$ref.slice(RESPONSE_REF.length)];
        const ref = answer?.content?.['application/json']?.schema?.$ref;
        if (!ref?.startsWith(COMPONENT_REF))
          throw new Error(`openapi.ts: ${operationId} names no component for its ${status} answer`);
        return ref.slice(COMPONENT_REF.length);
      }
    }
  }
  throw new Error(`openapi.ts: no operation ${operationId} in the fixtures`);
}

/** Each operation of the reference: its method, its path (`{name}` parameters) and its operationId. */
export function referenceOperations(): { method: string; path: string; operationId: string }[] {
  const seen = new Map<string, { method: string; path: string; operationId: string }>();
  for (const document of documents) {
    for (const [path, operations] of Object.entries(document.paths ?? {})) {
      for (const [method, operation] of Object.entries(operations)) {
        if (operation.operationId)
          seen.set(operation.operationId, { method: method.toUpperCase(), path, operationId: operation.operationId });
      }
    }
  }
  return [...seen.values()];
}

// ── Stream events ───────────────────────────────────────────────────────────────────────────

/** Each event of AssistantStreamEvent: what its data is, and where its schema is. */
const eventSchemas = (() => {
  const events = new Map<string, { data: string; pointer: string }>();
  const visit = (schema: Schema, pointer: string): void => {
    if (typeof schema.$ref === 'string') {
      const name = schema.$ref.slice(COMPONENT_REF.length);
      return visit(defined(components[name]), `#/$defs/${name}`);
    }
    if (Array.isArray(schema.oneOf)) {
      (schema.oneOf as Schema[]).forEach((branch, i) => visit(branch, `${pointer}/oneOf/${i}`));
      return;
    }
    const properties = schema.properties as Record<string, Schema> | undefined;
    const event = properties?.event?.enum;
    const data = properties?.data;
    if (!Array.isArray(event) || event.length !== 1 || !data)
      throw new Error(`openapi.ts: ${pointer} is not a stream event`);
    const ref = data.$ref;
    events.set(String(event[0]), {
      data: typeof ref === 'string' ? ref.slice(COMPONENT_REF.length) : JSON.stringify(data),
      pointer,
    });
  };
  visit(defined(components.AssistantStreamEvent), '#/$defs/AssistantStreamEvent');
  return events;
})();

/**
 * Every event of a run's stream, from the reference's AssistantStreamEvent: its name, and the
 * component its `data` is (`RunObject`, `MessageDeltaObject`...), or the inline schema's JSON
 * when it names none (`done`: the string `[DONE]`).
 */
export const streamEvents: ReadonlyMap<string, string> = new Map(
  [...eventSchemas].map(([name, { data }]) => [name, data]),
);

/**
 * Why an SSE event (its name and its parsed `data`; the raw text for `done`) is not one the
 * reference describes, as componentErrors says it; an unknown event name is a failure too.
 *
 * One documented departure: OpenAI's reference gives the `error` event's data as an `Error`
 * (`{message, type, param, code}`), but both official SDKs read it as an error response
 * (`data.error`: openai-node's Stream and openai-python's Stream raise `APIError` from it), and
 * the gateway sends what they read. So the `error` event's data is checked against
 * `ErrorResponse`.
 */
export function streamEventErrors(event: string, data: unknown): string[] {
  if (event === 'error') return componentErrors('ErrorResponse', data).map((line) => `data${line}`);
  const pointer = eventSchemas.get(event)?.pointer;
  if (!pointer)
    return [`event '${event}' is not an AssistantStreamEvent (known: ${[...streamEvents.keys()].join(', ')})`];
  return errorsOf(validator(pointer), { event, data });
}

/**
 * Why an SSE event of a streamed response (its name and its parsed `data`) is not one the
 * reference's ResponseStreamEvent describes, as componentErrors says it. The Responses API names
 * each event twice, in the SSE `event:` line and in the data's `type`: the two must agree.
 */
export function responseStreamEventErrors(event: string, data: unknown): string[] {
  const type = typeof data === 'object' && data !== null ? (data as Record<string, unknown>).type : undefined;
  const named = type === event ? [] : [`event '${event}' carries data of type ${JSON.stringify(type)}`];
  return [...named, ...componentErrors('ResponseStreamEvent', data)];
}
