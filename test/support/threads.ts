import type OpenAI from 'openai';
import { fakeThread, type FakeScenario } from './fake-upstream';
import { json, type Tenant, type TestGateway } from './gateway';

/**
 * What the thread and message suites share: a tenant with a virtual key on the fake provider and
 * an assistant with a function tool, and runs that hold a thread (waiting for tool outputs).
 */

export interface Member {
  tenant: Tenant;
  /** The SDK with the tenant's workspace key and virtual key. */
  openai: OpenAI;
  assistantId: string;
  /** Plain HTTP with the tenant's workspace key. */
  request(
    path: string,
    init?: { method?: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<Response>;
}

export const LOOKUP_TOOL = {
  type: 'function' as const,
  function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
};

/** A new tenant of `gateway`, whose upstream fetch is the fake's (any base_url reaches it). */
export async function member(gateway: TestGateway): Promise<Member> {
  const tenant = await gateway.tenant();
  const slug = await gateway.virtualKey(tenant, { base_url: 'http://fake.upstream.test/v1' });
  const openai = gateway.openai({ 'x-gateway-api-key': tenant.workspaceKey, 'x-gateway-virtual-key': slug });
  const assistant = await openai.beta.assistants.create({
    model: 'fake-model',
    instructions: 'Be brief.',
    tools: [LOOKUP_TOOL],
  });
  const request: Member['request'] = (path, init = {}) =>
    gateway.request(path, {
      ...init,
      key: tenant.workspaceKey,
      headers: { 'x-gateway-virtual-key': slug, ...init.headers },
    });
  return { tenant, openai, assistantId: assistant.id, request };
}

/** Reads a run until its status is one of `statuses` (or 10 s pass: the caller's assertion then fails). */
export async function waitForRun(who: Member, threadId: string, runId: string, statuses: string[]) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const run = await json(await who.request(`/v1/threads/${threadId}/runs/${runId}`));
    if (statuses.includes(run.status) || Date.now() > deadline) return run;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A run started with createAndRun (not streamed), its thread given one user message that says `scenario`. */
export async function startRun(
  who: Member,
  scenario: FakeScenario | FakeScenario[],
): Promise<{ threadId: string; runId: string }> {
  const response = await who.request('/v1/threads/runs', {
    body: { assistant_id: who.assistantId, thread: fakeThread('Look it up', scenario) },
  });
  if (response.status !== 200) throw new Error(`createAndRun answered ${response.status}: ${await response.text()}`);
  const run = await json(response);
  return { threadId: run.thread_id, runId: run.id };
}

/** A thread held by its run, which waits for the output of one tool call. */
export async function heldThread(who: Member) {
  const started = await startRun(who, [{ tool_calls: 1 }, { reply: 'Done.' }]);
  const run = await waitForRun(who, started.threadId, started.runId, ['requires_action']);
  if (run.status !== 'requires_action')
    throw new Error(`the run did not wait for tool outputs: ${JSON.stringify(run)}`);
  return { ...started, toolCallId: run.required_action.submit_tool_outputs.tool_calls[0].id as string };
}
