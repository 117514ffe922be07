import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { createClient, type Client } from '@libsql/client';
import { fakeDirective, type FakeScenario } from '../support/fake-upstream';
import type { GatewayProcess } from '../support/processes';
import { sleep } from '../support/wait';

export { sleep, waitFor } from '../support/wait';

/**
 * What the reliability suites share: a gateway process seen from outside (keys read from its first
 * start, a virtual key and an assistant created over HTTP), its database read directly (never
 * through the gateway, whose reads settle left-behind runs on the way), and the integrity checks
 * run against that database.
 */

export interface Target {
  url: string;
  workspaceKey: string;
  /** x-gateway-api-key and x-gateway-virtual-key, content-type. */
  headers: Record<string, string>;
  assistantId: string;
}

/** A fresh gateway's workspace key (printed once), a virtual key on `upstreamBaseURL`, an assistant. */
export async function prepare(gateway: GatewayProcess, upstreamBaseURL: string): Promise<Target> {
  const deadline = Date.now() + 10_000;
  while (!/workspace API key\s+gk_/.test(gateway.stdout()) && Date.now() < deadline) await sleep(20);
  const workspaceKey = /workspace API key\s+(gk_[A-Za-z0-9_-]+)/.exec(gateway.stdout())?.[1];
  if (!workspaceKey) throw new Error(`no workspace key printed:\n${gateway.stdout()}`);
  return prepareWorkspace(gateway.url, workspaceKey, upstreamBaseURL);
}

/**
 * In the workspace of `workspaceKey`, on the gateway at `url` (a process, or the Worker), a
 * virtual key on `upstreamBaseURL` (`reliability`) and an assistant, made over HTTP.
 */
export async function prepareWorkspace(url: string, workspaceKey: string, upstreamBaseURL: string): Promise<Target> {
  const headers = { 'x-gateway-api-key': workspaceKey, 'content-type': 'application/json' };
  const post = async (path: string, body: unknown) => {
    const response = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`POST ${path}: ${response.status} ${await response.text()}`);
    return (await response.json()) as { id: string };
  };
  await post('/v1/virtual-keys', { slug: 'reliability', provider: 'openai', base_url: upstreamBaseURL, api_key: 'sk-reliability' });
  const assistant = await post('/v1/assistants', { model: 'fake-model' });
  return { url, workspaceKey, headers: { ...headers, 'x-gateway-virtual-key': 'reliability' }, assistantId: assistant.id };
}

export function createRunRequest(target: Target, scenario: FakeScenario, stream: boolean): Promise<Response> {
  return fetch(`${target.url}/v1/threads/runs`, {
    method: 'POST',
    headers: target.headers,
    body: JSON.stringify({
      assistant_id: target.assistantId,
      stream,
      thread: { messages: [{ role: 'user', content: `Go\n${fakeDirective(scenario)}` }] },
    }),
  });
}

/** The gateway's database, read beside it (WAL mode allows readers while it writes). */
export function openDataDir(dataDir: string): Client {
  return createClient({ url: `file:${join(dataDir, 'gateway.db')}` });
}

const ACTIVE = "('queued', 'in_progress', 'cancelling')";

export async function activeRunCount(db: Client): Promise<number> {
  return Number((await db.execute(`SELECT count(*) FROM runs WHERE status IN ${ACTIVE}`)).rows[0]![0]);
}

/** Every run's status and last_error, by id. */
export async function runStates(db: Client): Promise<Map<string, { status: string; lastError: { code: string; message: string } | null }>> {
  const rows = (await db.execute('SELECT id, status, last_error FROM runs')).rows;
  return new Map(rows.map((row) => [String(row[0]), { status: String(row[1]), lastError: row[2] ? JSON.parse(String(row[2])) : null }]));
}

/**
 * Rows that only part of a write left, once no run is active: a run without its thread or its
 * user message, a step or message still in progress under an ended run, a completed run without its
 * completed answer, a message without its thread. Answers a description of each.
 */
export async function halfWrittenRows(db: Client): Promise<string[]> {
  const checks: [string, string][] = [
    ['run without its thread', 'SELECT r.id FROM runs r LEFT JOIN threads t ON t.id = r.thread_id WHERE t.id IS NULL'],
    ['message without its thread', 'SELECT m.id FROM messages m LEFT JOIN threads t ON t.id = m.thread_id WHERE t.id IS NULL'],
    ['thread without a message', 'SELECT t.id FROM threads t WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = t.id)'],
    ['step of a missing run', 'SELECT s.id FROM run_steps s LEFT JOIN runs r ON r.id = s.run_id WHERE r.id IS NULL'],
    [
      'step in progress under an ended run',
      `SELECT s.id FROM run_steps s JOIN runs r ON r.id = s.run_id WHERE s.status = 'in_progress' AND r.status NOT IN ${ACTIVE}`,
    ],
    [
      'message in progress under an ended run',
      `SELECT m.id FROM messages m JOIN runs r ON r.id = m.run_id WHERE m.status = 'in_progress' AND r.status NOT IN ${ACTIVE}`,
    ],
    [
      'completed run without its completed answer',
      `SELECT r.id FROM runs r WHERE r.status = 'completed'
         AND NOT EXISTS (SELECT 1 FROM messages m
           WHERE m.thread_id = r.thread_id AND m.run_id = r.id AND m.role = 'assistant' AND m.status = 'completed')`,
    ],
  ];
  const found: string[] = [];
  for (const [what, query] of checks) {
    for (const row of (await db.execute(query)).rows) found.push(`${what}: ${String(row[0])}`);
  }
  return found;
}

/**
 * Measured figures beside the tally (latency, throughput, memory), for the closing table of
 * `npm run test:reliability` (figures.jsonl in RELIABILITY_REPORT_DIR); nothing when unset.
 */
export function recordFigures(suite: string, figures: Record<string, number>): void {
  const dir = process.env.RELIABILITY_REPORT_DIR;
  if (!dir) return;
  appendFileSync(join(dir, 'figures.jsonl'), `${JSON.stringify({ suite, ...figures })}\n`);
}
