import { defined } from './defined';
import { readFileSync } from 'node:fs';
import { Ajv2020, type ErrorObject } from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import { DOCUMENT_PATH } from '../../src/http/openapi/generate';

/**
 * The gateway's own OpenAPI document (src/http/openapi/assets/openapi.json) as a validator: does an
 * answer have the shape the document declares for its operation and status?
 *
 *   answerErrors('GET', '/v1/assistants/asst_1', 200, body)  → [] or readable failures, one a line
 *   componentErrors('RunObject', data)                       (one event of a run's stream)
 *
 * OpenAPI 3.1's schemas are JSON Schema 2020-12, which Ajv2020 validates as they are: the document
 * is added whole, and each answer is checked against the schema at its place in it, so that the
 * document's own `$ref`s (#/components/schemas/…) resolve.
 */

type Document = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { schema?: object }> }> }>
  >;
};

const DOCUMENT_ID = 'gateway-openapi.json';
const document = JSON.parse(readFileSync(DOCUMENT_PATH, 'utf8')) as Document;
// Not strict: the document is not a schema itself (openapi, paths, info are not keywords).
const ajv = new Ajv2020({ allErrors: true, strict: false });
addFormats(ajv);
ajv.addSchema(document, DOCUMENT_ID);

/** `/v1/threads/{thread_id}` for `/v1/threads/thread_abc`: the document's path that `path` is an instance of. */
export function documentPath(path: string): string | undefined {
  const bare = defined(path.split('?')[0]);
  return Object.keys(document.paths).find((template) => {
    const pattern = template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+');
    return new RegExp(`^${pattern}$`).test(bare);
  });
}

/**
 * What the document declares that `method path` answers with `status` (`default` when it names no
 * such status), as a JSON pointer into it; undefined for an operation it does not have.
 */
export function declaredAnswer(
  method: string,
  path: string,
  status: number,
): { pointer: string; declared: boolean } | undefined {
  const template = documentPath(path);
  const operation = template === undefined ? undefined : document.paths[template]?.[method.toLowerCase()];
  if (!operation || template === undefined) return undefined;
  const declared = String(status) in operation.responses;
  const escaped = template.replace(/~/g, '~0').replace(/\//g, '~1');
  return {
    pointer: `#/paths/${escaped}/${method.toLowerCase()}/responses/${declared ? status : 'default'}/content/application~1json/schema`,
    declared,
  };
}

/** Why `value` is not the document's component schema `name` (RunObject, say), one failure a line. */
export function componentErrors(name: string, value: unknown): string[] {
  return failures(`${DOCUMENT_ID}#/components/schemas/${name}`, value);
}

/**
 * The component each event of a run's stream carries as its data, as OpenAI's AssistantStreamEvent
 * says; undefined for the deltas, `done` and `error` (whose data is not one of the objects).
 */
export function streamEventComponent(event: string): string | undefined {
  if (event.endsWith('.delta') || event === 'done' || event === 'error') return undefined;
  if (event === 'thread.created') return 'ThreadObject';
  if (event.startsWith('thread.run.step.')) return 'RunStepObject';
  if (event.startsWith('thread.run.')) return 'RunObject';
  if (event.startsWith('thread.message.')) return 'MessageObject';
  return undefined;
}

function failures(ref: string, value: unknown): string[] {
  const validate = ajv.getSchema(ref);
  if (!validate) return [`the document has no schema at ${ref}`];
  if (validate(value)) return [];
  return (validate.errors ?? []).map(
    (error: ErrorObject) => `${error.instancePath || '(root)'} ${error.message ?? ''} ${JSON.stringify(error.params)}`,
  );
}

/** Why `body` is not what the document declares for `method path` and `status`, one failure a line; [] when it is. */
export function answerErrors(method: string, path: string, status: number, body: unknown): string[] {
  const answer = declaredAnswer(method, path, status);
  if (!answer) return [`the document has no operation ${method} ${path}`];
  return failures(`${DOCUMENT_ID}${answer.pointer}`, body);
}
