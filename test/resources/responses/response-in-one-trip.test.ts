import { createHash } from 'node:crypto';
import type { Client } from '@libsql/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DatabaseProxy, whileDatabaseHeld } from '../../support/database-proxy';
import { defined } from '../../support/defined';
import { errorOf, json } from '../../support/envelope';
import { createFakeUpstream, fakeDirective } from '../../support/fake-upstream';
import type { Tenant, TestGateway } from '../../support/gateway';
import { gatewaysOnSqld, roundTrips as countedRoundTrips } from '../../support/gateways-on-sqld';
import { createPolicy } from '../../support/ratelimit';
import { parseEventStream } from '../../support/sse';
import { waitFor } from '../../support/wait';

/**
 * A response created on a database server (LIBSQL_URL) whose input needs no read: its rows written
 * in one round trip with its provider called beside it (resources/responses/commands.ts,
 * responseInOneTrip). The database is held at a proxy in front of a real sqld to show the order;
 * the changes that must make it take the path of reads are made as another gateway or the CLI
 * would, straight in the database (or through another gateway on it), after a response that left
 * the settings in memory.
 */

let proxy: DatabaseProxy;
let gateway: TestGateway;
/** Another gateway on the same database, whose changes this one learns only from the database. */
let other: TestGateway;
let elsewhere: Client;
let close: () => Promise<void>;
const upstream = createFakeUpstream();

beforeAll(async () => {
  ({ proxy, gateway, other, elsewhere, close } = await gatewaysOnSqld(upstream));
});
afterAll(() => close());
afterEach(async () => {
  expect(await gateway.tasks.drain(30_000)).toBe(true);
});

/**
 * A tenant whose default virtual key calls the fake, and an assistant to serve as a prompt. The
 * responses after the first find the settings held, as every one after them.
 */
async function setup(instructions = 'Be brief.') {
  const tenant = await gateway.tenant();
  await gateway.virtualKey(tenant, { base_url: 'http://fake.test/v1', default: true });
  const assistant = await json(
    await gateway.request('/v1/assistants', { key: tenant.workspaceKey, body: { model: 'fake-model', instructions } }),
  );
  for (let i = 0; i < 2; i++) {
    const warm = await create(tenant, { input: 'warm', prompt: { id: assistant.id } });
    expect(warm.status).toBe(200);
  }
  await gateway.tasks.drain(10_000);
  return { tenant, promptId: assistant.id as string };
}

function create(tenant: Tenant, body: Record<string, unknown>) {
  return gateway.request('/v1/responses', { key: tenant.workspaceKey, body: { model: 'fake-model', ...body } });
}

async function streamed(tenant: Tenant, body: Record<string, unknown>) {
  const response = await create(tenant, { ...body, stream: true });
  return { status: response.status, events: parseEventStream(await response.text()) };
}

/** The text of a streamed response's deltas. */
const deltaText = (events: { event: string; data: unknown }[]) =>
  events
    .filter((event) => event.event === 'response.output_text.delta')
    .map((event) => (event.data as { delta: string }).delta)
    .join('');

/** The text of a response's output messages. */
const outputText = (response: { output: { type: string; content?: { text?: string }[] }[] }) =>
  response.output
    .filter((item) => item.type === 'message')
    .flatMap((item) => item.content ?? [])
    .map((part) => part.text ?? '')
    .join('');

/** The rows of `table` in the tenant's workspace. */
const countOf = async (table: 'responses' | 'runs' | 'threads' | 'usage', tenant: Tenant) =>
  Number(
    defined(
      (
        await elsewhere.execute({
          sql:
            table === 'usage'
              ? 'SELECT coalesce(sum(requests), 0) AS n FROM usage WHERE workspace_id = ?'
              : `SELECT count(*) AS n FROM ${table} WHERE workspace_id = ?`,
          args: [tenant.workspace.id],
        })
      ).rows[0],
    ).n,
  );

/** The system message of the provider's `index`th request. */
const systemOf = (index: number) =>
  (defined(upstream.requests[index]).body?.messages as { role: string; content: string }[]).find(
    (message) => message.role === 'system',
  )?.content;

/** Waits for the provider's `index`th call to have ended, and answers how. */
const outcomeOf = (index: number) =>
  waitFor(
    () => defined(upstream.requests[index]).outcome,
    (outcome) => outcome !== 'open',
  );

/** What a request that was refused must have left as it was: the tenant's responses, threads and usage. */
const tallies = async (tenant: Tenant) => ({
  responses: await countOf('responses', tenant),
  threads: await countOf('threads', tenant),
  usage: await countOf('usage', tenant),
});

/** The round trips to the database `task` makes, its response's last writes included. */
const roundTrips = (task: () => Promise<unknown>) => countedRoundTrips(gateway, proxy, task);

describe('a response whose input needs no read: the provider called beside its write', () => {
  it('calls the provider once while the write is at the database, and tells nothing before it commits', async () => {
    const { tenant } = await setup();
    const calls = upstream.requests.length;
    const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(tenant, { input: [{ role: 'user', content: [{ type: 'input_text', text: 'known words' }] }] }),
    );
    // The provider was called while the response's write waited at the database (whileDatabaseHeld waits for both).
    expect(seen.called).toBe(1);
    expect(upstream.requests.length - calls).toBe(1);
    expect(answer.status).toBe(200);
    const names = answer.events.map((event) => event.event);
    expect(names.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(names.at(-1)).toBe('response.completed');
    expect(deltaText(answer.events)).toBe('You said: known words');
    const created = defined(answer.events[0]).data as { response: { id: string } };
    const stored = await json(
      await gateway.request(`/v1/responses/${created.response.id}`, { key: tenant.workspaceKey }),
    );
    expect(stored.status).toBe('completed');
    expect(outputText(stored)).toBe('You said: known words');
  });

  it('makes a response in two round trips (its rows with the settings guard, then its end), and one more to answer it whole', async () => {
    const { tenant, promptId } = await setup();
    const cases = [
      { body: { stream: true }, trips: 2 },
      { body: { stream: true, prompt: { id: promptId } }, trips: 2 },
      // Its run, steps and messages read back together once it ended.
      { body: { stream: false }, trips: 3 },
    ];
    for (const { body, trips: expected } of cases) {
      proxy.statements.length = 0;
      proxy.keepStatements = true;
      const trips = await roundTrips(async () => {
        const response = await create(tenant, { input: 'hi', ...body });
        expect(response.status).toBe(200);
        await response.text();
      });
      proxy.keepStatements = false;
      expect(trips, JSON.stringify(proxy.statements)).toBe(expected);
    }
  });

  it("reads what a response goes on from in its write's transaction when it is not known here: a previous response, a conversation", async () => {
    const { tenant } = await setup();
    // Made by another gateway: this one knows neither the chain nor the conversation.
    const first = await json(
      await other.request('/v1/responses', { key: tenant.workspaceKey, body: { model: 'fake-model', input: 'first' } }),
    );
    const conversation = await json(await other.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    const inConversation = { model: 'fake-model', input: 'first', conversation: conversation.id };
    expect((await other.request('/v1/responses', { key: tenant.workspaceKey, body: inConversation })).status).toBe(200);
    for (const body of [{ previous_response_id: first.id }, { conversation: conversation.id }]) {
      proxy.statements.length = 0;
      proxy.keepStatements = true;
      let text = '';
      const trips = await roundTrips(async () => {
        const answer = await streamed(tenant, { input: 'and then?', ...body });
        text = deltaText(answer.events);
      });
      proxy.keepStatements = false;
      expect(text).toBe('You said: and then?');
      // Its rows with the history read in their transaction, then its end (reading first took 3).
      expect(trips, JSON.stringify(proxy.statements)).toBe(2);
      await other.tasks.drain(10_000);
      // The prompt had the turn before: its input and its answer.
      const sent = defined(upstream.requests.at(-1)).body?.messages as { role: string; content: string }[];
      expect(sent.map((message) => message.content)).toEqual(['first', 'You said: first', 'and then?']);
    }
  });

  it('answers a response not streamed once it ended, its provider called while the write waited', async () => {
    const { tenant } = await setup();
    const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
      create(tenant, { input: `whole\n${fakeDirective({ reply: 'All of it.' })}` }),
    );
    expect(seen.called).toBe(1);
    expect(answer.status).toBe(200);
    const whole = await json(answer);
    expect(whole.status).toBe('completed');
    expect(outputText(whole)).toBe('All of it.');
  });

  it("makes the response from what is read when its prompt's assistant changed elsewhere, telling nothing of the first answer", async () => {
    const { tenant, promptId } = await setup('Old instructions.');
    await elsewhere.execute({
      sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
      args: ['New instructions.', promptId],
    });
    const responses = await countOf('responses', tenant);
    const calls = upstream.requests.length;
    const { answer } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(tenant, { input: 'which?', prompt: { id: promptId } }),
    );
    // The first call, on the assistant as last seen, was aborted; the second, on the one read, answered.
    expect(upstream.requests.length - calls).toBe(2);
    expect(systemOf(calls)).toBe('Old instructions.');
    expect(systemOf(calls + 1)).toBe('New instructions.');
    expect(await outcomeOf(calls)).toBe('cancelled');
    const names = answer.events.map((event) => event.event);
    expect(names.filter((name) => name === 'response.created')).toHaveLength(1);
    expect(names.at(-1)).toBe('response.completed');
    expect(deltaText(answer.events)).toBe('You said: which?');
    await gateway.tasks.drain(10_000);
    expect(await countOf('responses', tenant)).toBe(responses + 1);
    expect(await countOf('runs', tenant)).toBe(responses + 1);
  });

  it('answers 401 for a key revoked elsewhere: the call made on it is aborted, and nothing of it written or counted', async () => {
    const { tenant } = await setup();
    const hash = createHash('sha256').update(tenant.workspaceKey).digest('hex');
    await elsewhere.execute({ sql: 'UPDATE api_keys SET revoked_at = ? WHERE hash = ?', args: [Date.now(), hash] });
    const before = await tallies(tenant);
    const calls = upstream.requests.length;
    const { answer } = await whileDatabaseHeld(proxy, upstream, () => create(tenant, { input: 'hi', stream: true }));
    expect(answer.status).toBe(401);
    expect(await errorOf(answer)).toMatchObject({ code: 'invalid_api_key' });
    expect(upstream.requests.length - calls).toBe(1);
    expect(await outcomeOf(calls)).toBe('cancelled');
    await gateway.tasks.drain(10_000);
    expect(await tallies(tenant)).toEqual(before);
  });

  it('applies a policy made by another gateway to the response that guessed without it, and refuses the next before its provider', async () => {
    const { tenant } = await setup();
    // By the day: a minute's window could turn between the two responses, and the second be the first of its window.
    await createPolicy(other, tenant, { value: 1, unit: 'rpd' });
    const calls = upstream.requests.length;
    const { answer } = await whileDatabaseHeld(proxy, upstream, () => create(tenant, { input: 'hi', stream: true }));
    // Served again on the settings read: admitted under the policy, whose headers it carries.
    expect(answer.status).toBe(200);
    expect(answer.headers.get('x-ratelimit-limit-requests')).toBe('1');
    expect(deltaText(parseEventStream(await answer.text()))).toBe('You said: hi');
    expect(upstream.requests.length - calls).toBe(2);
    expect(await outcomeOf(calls)).toBe('cancelled');
    const refused = await create(tenant, { input: 'again', stream: true });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(upstream.requests.length - calls).toBe(2);
  });

  it('gives its admission back whole when its guard failed: the response made from its reads is admitted in its place', async () => {
    const { tenant, promptId } = await setup('Old instructions.');
    // By the day, as above.
    await createPolicy(gateway, tenant, { value: 2, unit: 'rpd' });
    // The first after the policy was made here reads the settings; the policy counts it.
    expect((await create(tenant, { input: 'one', prompt: { id: promptId } })).status).toBe(200);
    await elsewhere.execute({
      sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
      args: ['New instructions.', promptId],
    });
    const calls = upstream.requests.length;
    // (Not held at the proxy: on Node the policy's counter is a statement, before the provider's call.)
    const answer = await streamed(tenant, { input: 'two', prompt: { id: promptId } });
    // Admitted as it guessed, given back when its guard failed, admitted again: the second of two.
    expect(answer.status).toBe(200);
    expect(upstream.requests.length - calls).toBe(2);
    expect(systemOf(calls + 1)).toBe('New instructions.');
    const third = await create(tenant, { input: 'three', stream: true });
    expect(third.status).toBe(429);
    expect(upstream.requests.length - calls).toBe(2);
  });

  it('answers the database error when the write fails otherwise, with nothing of the provider call made beside it', async () => {
    const { tenant } = await setup();
    const calls = upstream.requests.length;
    const target = proxy.target;
    // The write is held while the provider is called, then sent to where no database answers.
    proxy.target = new URL('http://127.0.0.1:1');
    const { answer } = await whileDatabaseHeld(proxy, upstream, async () => {
      const response = await create(tenant, { input: 'hi', stream: true });
      return { status: response.status, body: await response.text() };
    }).finally(() => (proxy.target = target));
    expect(answer.status).toBe(500);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { type: 'server_error' } });
    expect(upstream.requests.length - calls).toBe(1);
    expect(await outcomeOf(calls)).toBe('cancelled');
  });
});

/** The contents of the messages the provider's `index`th request was sent, the system message left out. */
const sentOf = (index: number) =>
  (defined(upstream.requests.at(index)).body?.messages as { role: string; content: string }[])
    .filter((message) => message.role !== 'system')
    .map((message) => message.content);

/** The id of a streamed response, from its first event. */
const idOf = (events: { event: string; data: unknown }[]) =>
  (defined(events[0]).data as { response: { id: string } }).response.id;

describe('a response on a previous response or in a conversation, its history known here: the provider called beside its write', () => {
  it('goes on from a previous response turn after turn, each called once while its write is held, the prompt the whole chain', async () => {
    const { tenant } = await setup();
    // Not streamed: its answer is handed back all the same, once it ended (RunHost.execute).
    const first = await json(await create(tenant, { input: 'first' }));
    let previous = first.id as string;
    const chain = ['first', 'You said: first'];
    for (const text of ['second', 'third']) {
      const calls = upstream.requests.length;
      const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(tenant, { input: text, previous_response_id: previous }),
      );
      expect(seen.called).toBe(1);
      expect(upstream.requests.length - calls).toBe(1);
      expect(answer.status).toBe(200);
      expect(deltaText(answer.events)).toBe(`You said: ${text}`);
      chain.push(text);
      expect(sentOf(-1)).toEqual(chain);
      chain.push(`You said: ${text}`);
      previous = idOf(answer.events);
    }
    const last = await json(await gateway.request(`/v1/responses/${previous}`, { key: tenant.workspaceKey }));
    expect(last.status).toBe('completed');
    expect(last.previous_response_id).not.toBe(first.id);
  });

  it('makes a response in a conversation made here, turn after turn, each called once while its write is held', async () => {
    const { tenant } = await setup();
    const conversation = await json(
      await gateway.request('/v1/conversations', {
        key: tenant.workspaceKey,
        body: { items: [{ type: 'message', role: 'user', content: 'from the start' }] },
      }),
    );
    const history = ['from the start'];
    for (const text of ['one', 'two']) {
      const calls = upstream.requests.length;
      const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(tenant, { input: text, conversation: conversation.id }),
      );
      expect(seen.called).toBe(1);
      expect(upstream.requests.length - calls).toBe(1);
      expect(deltaText(answer.events)).toBe(`You said: ${text}`);
      history.push(text);
      expect(sentOf(-1)).toEqual(history);
      history.push(`You said: ${text}`);
    }
    // An item added here is known too.
    const added = await gateway.request(`/v1/conversations/${conversation.id}/items`, {
      key: tenant.workspaceKey,
      body: { items: [{ type: 'message', role: 'user', content: 'added here' }] },
    });
    expect(added.status).toBe(200);
    const calls = upstream.requests.length;
    const { seen } = await whileDatabaseHeld(proxy, upstream, () =>
      streamed(tenant, { input: 'three', conversation: conversation.id }),
    );
    expect(seen.called).toBe(1);
    expect(upstream.requests.length - calls).toBe(1);
    expect(sentOf(-1)).toEqual([...history, 'added here', 'three']);
    const items = await json(
      await gateway.request(`/v1/conversations/${conversation.id}/items?order=asc`, { key: tenant.workspaceKey }),
    );
    expect(items.data).toHaveLength(8);
  });

  it('makes the response from what is read when a response of the chain was made beside a conversation the chain goes through', async () => {
    const { tenant } = await setup();
    const conversation = await json(await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    const zero = await json(await create(tenant, { input: 'zero', conversation: conversation.id }));
    // On a response in a conversation: read, and its answer handed back as its chain's.
    const one = await json(await create(tenant, { input: 'one', previous_response_id: zero.id }));
    // The chain goes through the conversation, which another gateway extends.
    const elsewhereTurn = { model: 'fake-model', input: 'elsewhere', conversation: conversation.id };
    expect((await other.request('/v1/responses', { key: tenant.workspaceKey, body: elsewhereTurn })).status).toBe(200);
    await other.tasks.drain(10_000);
    const calls = upstream.requests.length;
    const answer = await streamed(tenant, { input: 'two', previous_response_id: one.id });
    expect(answer.status).toBe(200);
    expect(deltaText(answer.events)).toBe('You said: two');
    // The guess, on the chain as known, was aborted; the response was made from the chain read.
    expect(upstream.requests.length - calls).toBe(2);
    expect(await outcomeOf(calls)).toBe('cancelled');
    expect(sentOf(calls)).toEqual(['zero', 'You said: zero', 'one', 'You said: one', 'two']);
    expect(sentOf(calls + 1)).toEqual([
      'zero',
      'You said: zero',
      'one',
      'You said: one',
      'elsewhere',
      'You said: elsewhere',
      'two',
    ]);
    const names = answer.events.map((event) => event.event);
    expect(names.filter((name) => name === 'response.created')).toHaveLength(1);
  });

  it("reads the conversation again once a function call's output is added to it here: no guess on a history with calls", async () => {
    const { tenant } = await setup();
    const conversation = await json(await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    expect((await create(tenant, { input: 'one', conversation: conversation.id })).status).toBe(200);
    // Another gateway's response calls a function in it: a call this one does not know of.
    const called = await other.request('/v1/responses', {
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        conversation: conversation.id,
        input: `weather?\n${fakeDirective({ tool_calls: [{ name: 'get_weather', arguments: {}, id: 'call_w' }] })}`,
        tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } }],
      },
    });
    expect(called.status).toBe(200);
    await other.tasks.drain(10_000);
    const output = await gateway.request(`/v1/conversations/${conversation.id}/items`, {
      key: tenant.workspaceKey,
      body: { items: [{ type: 'function_call_output', call_id: 'call_w', output: 'sunny' }] },
    });
    expect(output.status).toBe(200);
    const calls = upstream.requests.length;
    const answer = await streamed(tenant, { input: 'two', conversation: conversation.id });
    expect(deltaText(answer.events)).toBe('You said: two');
    // Made from its reads at once: nothing guessed on what was known before the call.
    expect(upstream.requests.length - calls).toBe(1);
    const sent = defined(upstream.requests.at(-1)).body?.messages as { role: string; tool_call_id?: string }[];
    expect(sent.some((message) => message.role === 'tool' && message.tool_call_id === 'call_w')).toBe(true);
  });

  it('makes the response from what is read when another gateway gave the conversation items', async () => {
    const { tenant } = await setup();
    const conversation = await json(await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    expect((await create(tenant, { input: 'one', conversation: conversation.id })).status).toBe(200);
    const added = await other.request(`/v1/conversations/${conversation.id}/items`, {
      key: tenant.workspaceKey,
      body: { items: [{ type: 'message', role: 'user', content: 'added elsewhere' }] },
    });
    expect(added.status).toBe(200);
    const [responses, runs] = [await countOf('responses', tenant), await countOf('runs', tenant)];
    const calls = upstream.requests.length;
    const answer = await streamed(tenant, { input: 'two', conversation: conversation.id });
    expect(deltaText(answer.events)).toBe('You said: two');
    expect(upstream.requests.length - calls).toBe(2);
    expect(await outcomeOf(calls)).toBe('cancelled');
    expect(sentOf(calls + 1)).toEqual(['one', 'You said: one', 'added elsewhere', 'two']);
    await gateway.tasks.drain(10_000);
    // Written once: nothing of the guess.
    expect(await countOf('responses', tenant)).toBe(responses + 1);
    expect(await countOf('runs', tenant)).toBe(runs + 1);
  });

  it('answers 404 to another workspace naming a previous response or conversation known here, calling no provider, and leaves them known to their own', async () => {
    const { tenant } = await setup();
    const { tenant: stranger } = await setup();
    const first = await json(await create(tenant, { input: 'first' }));
    const conversation = await json(await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    expect((await create(tenant, { input: 'one', conversation: conversation.id })).status).toBe(200);
    const calls = upstream.requests.length;
    for (const [context, code] of [
      [{ previous_response_id: first.id }, 'response_not_found'],
      [{ conversation: conversation.id }, 'conversation_not_found'],
    ] as const) {
      const refused = await create(stranger, { input: 'theirs?', stream: true, ...context });
      expect(refused.status).toBe(404);
      expect(await errorOf(refused)).toMatchObject({ code });
    }
    // Their history was not sent anywhere: no guess was made on it.
    expect(upstream.requests.length).toBe(calls);
    // Nor was it forgotten: the owner's next turn on each is still called beside its write.
    for (const context of [{ previous_response_id: first.id }, { conversation: conversation.id }]) {
      const before = upstream.requests.length;
      const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(tenant, { input: 'mine', ...context }),
      );
      expect(seen.called).toBe(1);
      expect(upstream.requests.length - before).toBe(1);
      expect(deltaText(answer.events)).toBe('You said: mine');
    }
  });

  it('answers 404 for a previous response deleted by another gateway: the guess aborted, nothing written or counted', async () => {
    const { tenant } = await setup();
    const first = await json(await create(tenant, { input: 'first' }));
    expect(
      (await other.request(`/v1/responses/${first.id}`, { key: tenant.workspaceKey, method: 'DELETE' })).status,
    ).toBe(200);
    const before = await tallies(tenant);
    const calls = upstream.requests.length;
    const answer = await create(tenant, { input: 'second', previous_response_id: first.id, stream: true });
    expect(answer.status).toBe(404);
    expect(await errorOf(answer)).toMatchObject({ code: 'response_not_found', param: 'previous_response_id' });
    expect(upstream.requests.length - calls).toBe(1);
    expect(await outcomeOf(calls)).toBe('cancelled');
    await gateway.tasks.drain(10_000);
    expect(await tallies(tenant)).toEqual(before);
  });

  it.each(['previous_response_id', 'conversation'])(
    "makes the response from what is read when its prompt's assistant changed elsewhere (%s), telling nothing of the first answer",
    async (on) => {
      const { tenant, promptId } = await setup('Old instructions.');
      const prompt = { id: promptId };
      const conversation = await json(
        await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }),
      );
      const first = await json(
        await create(tenant, {
          input: 'first',
          prompt,
          ...(on === 'conversation' ? { conversation: conversation.id } : {}),
        }),
      );
      await elsewhere.execute({
        sql: 'UPDATE assistants SET instructions = ? WHERE id = ?',
        args: ['New instructions.', promptId],
      });
      const calls = upstream.requests.length;
      const context = on === 'conversation' ? { conversation: conversation.id } : { previous_response_id: first.id };
      const answer = await streamed(tenant, { input: 'which?', prompt, ...context });
      expect(deltaText(answer.events)).toBe('You said: which?');
      expect(answer.events.filter((event) => event.event === 'response.created')).toHaveLength(1);
      expect(upstream.requests.length - calls).toBe(2);
      expect(await outcomeOf(calls)).toBe('cancelled');
      expect(systemOf(calls)).toBe('Old instructions.');
      expect(systemOf(calls + 1)).toBe('New instructions.');
      expect(sentOf(calls + 1)).toEqual(['first', 'You said: first', 'which?']);
    },
  );
});

/** A response's body whose answer calls a function, which the next response must give the output of. */
const CALLS_A_FUNCTION = {
  input: `weather?\n${fakeDirective({ tool_calls: [{ name: 'get_weather', arguments: {}, id: 'call_w' }] })}`,
  tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } }],
};

describe('a response after a function call made here: the call known, its output given beside the write', () => {
  const OUTPUT = { type: 'function_call_output', call_id: 'call_w', output: 'sunny' };
  /** The outputs stored in the first call of each tool-calls step of response `id`. */
  const storedOutputs = async (id: string) =>
    (
      await elsewhere.execute({
        sql: "SELECT json_extract(step_details, '$.tool_calls[0].function.output') AS output FROM run_steps WHERE run_id = ? AND type = 'tool_calls'",
        args: [id],
      })
    ).rows.map((row) => row.output);
  /** The messages of the provider's last request, as it was sent them. */
  const sentMessages = () =>
    defined(upstream.requests.at(-1)).body?.messages as {
      role: string;
      content: string | null;
      tool_call_id?: string;
      tool_calls?: { id: string }[];
    }[];

  it.each(['previous_response_id', 'conversation'] as const)(
    'goes on (%s) through a function call, its output and a text turn, each called once while its write is held',
    async (on) => {
      // In a conversation the call is given back with its output, as a client keeping the items does.
      const call = { type: 'function_call', call_id: 'call_w', name: 'get_weather', arguments: '{}' };
      const given = on === 'conversation' ? [call, OUTPUT] : [OUTPUT];
      const { tenant } = await setup();
      const conversation =
        on === 'conversation'
          ? (await json(await gateway.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }))).id
          : null;
      const context = (previous: string) =>
        conversation ? { conversation: conversation as string } : { previous_response_id: previous };
      const called = await streamed(tenant, { ...CALLS_A_FUNCTION, ...(conversation ? { conversation } : {}) });
      const item = called.events.find((event) => event.event === 'response.output_item.done');
      expect(item?.data).toMatchObject({ item: { type: 'function_call', call_id: 'call_w' } });

      const turns = [
        { input: given, reply: 'The tool returned: sunny' },
        { input: 'and then?', reply: 'You said: and then?' },
      ];
      let previous = idOf(called.events);
      for (const turn of turns) {
        const calls = upstream.requests.length;
        const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
          streamed(tenant, { tools: CALLS_A_FUNCTION.tools, input: turn.input, ...context(previous) }),
        );
        expect(seen.called).toBe(1);
        expect(upstream.requests.length - calls).toBe(1);
        expect(answer.status).toBe(200);
        expect(deltaText(answer.events)).toBe(turn.reply);
        // The call and its output in the prompt, as the path of reads sends them.
        const sent = sentMessages();
        expect(sent.find((message) => message.tool_calls?.[0]?.id === 'call_w')).toBeDefined();
        expect(sent.find((message) => message.role === 'tool')).toMatchObject({
          tool_call_id: 'call_w',
          content: 'sunny',
        });
        previous = idOf(answer.events);
      }
      expect(sentMessages().slice(-2)).toMatchObject([
        { role: 'assistant', content: 'The tool returned: sunny' },
        { role: 'user', content: 'and then?' },
      ]);
      // The output was written into the call's step.
      expect(await storedOutputs(idOf(called.events))).toEqual(['sunny']);
    },
  );

  it('sends the prompt the path of reads sends, for calls made after some text: the text, then the calls and their outputs', async () => {
    const { tenant } = await setup();
    const calls = { reply: 'Let me look.', tool_calls: [{ name: 'get_weather', arguments: {}, id: 'call_w' }] };
    const body = { input: `weather?\n${fakeDirective(calls)}`, tools: CALLS_A_FUNCTION.tools };
    /** The messages the provider was sent for the output turn after a response made so (`how`). */
    const outputTurn = async (how: Record<string, unknown>) => {
      const { id } = await json(await create(tenant, { ...body, ...how }));
      const called = await waitFor(
        async () => json(await gateway.request(`/v1/responses/${id}`, { key: tenant.workspaceKey })),
        (response) => response.status === 'completed',
      );
      expect(called.output).toMatchObject([{ type: 'message' }, { type: 'function_call', call_id: 'call_w' }]);
      let text = '';
      const trips = await roundTrips(async () => {
        const answer = await streamed(tenant, { tools: body.tools, input: [OUTPUT], previous_response_id: id });
        text = deltaText(answer.events);
      });
      expect(text).toBe('The tool returned: sunny');
      return { sent: sentMessages(), trips };
    };
    // Answered whole: handed back, the output turn made from what is known (its rows, then its end).
    const known = await outputTurn({});
    expect(known.trips).toBe(2);
    // In the background: not handed back, the output turn made from what it reads, first.
    const read = await outputTurn({ background: true });
    expect(read.trips).toBeGreaterThan(2);
    expect(known.sent).toEqual(read.sent);
    expect(known.sent.map((message) => message.role)).toEqual(['user', 'assistant', 'assistant', 'tool']);
  });

  it('answers as the path of reads when another gateway gave the known call its output: the guess aborted, nothing of it written', async () => {
    const { tenant } = await setup();
    const called = await json(await create(tenant, CALLS_A_FUNCTION));
    const elsewhereAnswered = await other.request('/v1/responses', {
      key: tenant.workspaceKey,
      body: {
        model: 'fake-model',
        tools: CALLS_A_FUNCTION.tools,
        input: [{ ...OUTPUT, output: 'rainy' }],
        previous_response_id: called.id,
      },
    });
    expect(elsewhereAnswered.status).toBe(200);
    await other.tasks.drain(10_000);
    const before = await tallies(tenant);
    const calls = upstream.requests.length;
    const answer = await create(tenant, {
      tools: CALLS_A_FUNCTION.tools,
      input: [OUTPUT],
      previous_response_id: called.id,
      stream: true,
    });
    expect(answer.status).toBe(400);
    expect(await errorOf(answer)).toMatchObject({ code: 'invalid_value', param: 'input[0].call_id' });
    // Called beside the write its guard failed, then aborted.
    expect(upstream.requests.length - calls).toBe(1);
    expect(await outcomeOf(calls)).toBe('cancelled');
    await gateway.tasks.drain(10_000);
    expect(await tallies(tenant)).toEqual(before);
    expect(await storedOutputs(called.id)).toEqual(['rainy']);
  });

  it('answers 400 for a text turn on a known call still without its output, calling no provider', async () => {
    const { tenant } = await setup();
    const called = await json(await create(tenant, CALLS_A_FUNCTION));
    const before = await tallies(tenant);
    const calls = upstream.requests.length;
    const answer = await create(tenant, { input: 'and then?', previous_response_id: called.id, stream: true });
    expect(answer.status).toBe(400);
    expect(await errorOf(answer)).toMatchObject({ code: 'invalid_value', param: 'input' });
    expect(upstream.requests.length).toBe(calls);
    await gateway.tasks.drain(10_000);
    expect(await tallies(tenant)).toEqual(before);
  });
});

describe('a response on a previous response or in a conversation not known here: its history read in its write', () => {
  /** A response made by the other gateway, whose answer this one was never handed. */
  const madeElsewhere = async (tenant: Tenant, body: Record<string, unknown>) => {
    const made = await other.request('/v1/responses', {
      key: tenant.workspaceKey,
      body: { model: 'fake-model', ...body },
    });
    expect(made.status).toBe(200);
    await other.tasks.drain(10_000);
    return json(made);
  };

  it('hands its answer back: the turn after it is called beside its write, the prompt the whole history', async () => {
    const { tenant } = await setup();
    const first = await madeElsewhere(tenant, { input: 'first' });
    const conversation = await json(await other.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    await madeElsewhere(tenant, { input: 'first', conversation: conversation.id });
    for (const on of ['previous_response_id', 'conversation'] as const) {
      const context = (previous: string) =>
        on === 'conversation' ? { conversation: conversation.id as string } : { previous_response_id: previous };
      const second = await streamed(tenant, { input: 'second', ...context(first.id) });
      expect(deltaText(second.events)).toBe('You said: second');
      const calls = upstream.requests.length;
      const { seen, answer } = await whileDatabaseHeld(proxy, upstream, () =>
        streamed(tenant, { input: 'third', ...context(idOf(second.events)) }),
      );
      expect(seen.called).toBe(1);
      expect(upstream.requests.length - calls).toBe(1);
      expect(deltaText(answer.events)).toBe('You said: third');
      expect(sentOf(-1)).toEqual(['first', 'You said: first', 'second', 'You said: second', 'third']);
    }
  });

  it("reads a history whose function call has its output in its write's transaction too: the call and its output in the prompt", async () => {
    const { tenant } = await setup();
    const answeredElsewhere = async (context: Record<string, unknown>) => {
      const called = await madeElsewhere(tenant, { ...CALLS_A_FUNCTION, ...context });
      const output = { type: 'function_call_output', call_id: 'call_w', output: 'sunny' };
      const next = 'previous_response_id' in context ? { previous_response_id: called.id } : context;
      return madeElsewhere(tenant, { tools: CALLS_A_FUNCTION.tools, input: [output], ...next });
    };
    const answered = await answeredElsewhere({ previous_response_id: null });
    const conversation = await json(await other.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }));
    await answeredElsewhere({ conversation: conversation.id });
    for (const body of [{ previous_response_id: answered.id }, { conversation: conversation.id }]) {
      const calls = upstream.requests.length;
      let text = '';
      const trips = await roundTrips(async () => {
        const answer = await streamed(tenant, { input: 'and then?', ...body });
        text = deltaText(answer.events);
      });
      expect(text).toBe('You said: and then?');
      // Its rows with the history read in their transaction, then its end (six while its guard
      // refused any tool call: the write it failed, then the path of reads).
      expect(trips).toBe(2);
      expect(upstream.requests.length - calls).toBe(1);
      const sent = defined(upstream.requests.at(-1)).body?.messages as {
        role: string;
        content: string | null;
        tool_call_id?: string;
        tool_calls?: { id: string }[];
      }[];
      expect(sent.find((message) => message.tool_calls?.[0]?.id === 'call_w')).toBeDefined();
      expect(sent.find((message) => message.role === 'tool')).toMatchObject({
        tool_call_id: 'call_w',
        content: 'sunny',
      });
      expect(sent.at(-1)).toMatchObject({ role: 'user', content: 'and then?' });
    }
  });

  /**
   * Each previous response the path of reads refuses, or whose chain it would send otherwise: the
   * guard fails the write, nothing of it stays, and the answer is the path of reads'.
   */
  /** A response going on from `id` (previous_response_id). */
  const onResponse = (made: { id: string }) => ({ previous_response_id: made.id });
  it.each([
    {
      name: 'on a previous response kept out of the store (store: false)',
      context: async (tenant: Tenant) => onResponse(await json(await create(tenant, { input: 'first', store: false }))),
      status: 400,
      error: { code: 'invalid_value', param: 'previous_response_id' },
    },
    {
      name: 'on a previous response deleted by another gateway',
      context: async (tenant: Tenant) => {
        const first = await madeElsewhere(tenant, { input: 'first' });
        const deleted = await other.request(`/v1/responses/${first.id}`, {
          key: tenant.workspaceKey,
          method: 'DELETE',
        });
        expect(deleted.status).toBe(200);
        return onResponse(first);
      },
      status: 404,
      error: { code: 'response_not_found', param: 'previous_response_id' },
    },
    {
      name: "on another workspace's previous response",
      context: async () => onResponse(await madeElsewhere((await setup()).tenant, { input: 'theirs' })),
      status: 404,
      error: { code: 'response_not_found', param: 'previous_response_id' },
    },
    {
      name: 'on a previous response whose function call has no output',
      context: async (tenant: Tenant) => onResponse(await madeElsewhere(tenant, CALLS_A_FUNCTION)),
      status: 400,
      error: { code: 'invalid_value', param: 'input' },
    },
    {
      name: 'in a conversation whose function call has no output',
      context: async (tenant: Tenant) => {
        const conversation = await json(
          await other.request('/v1/conversations', { key: tenant.workspaceKey, body: {} }),
        );
        await madeElsewhere(tenant, { ...CALLS_A_FUNCTION, conversation: conversation.id });
        return { conversation: conversation.id as string };
      },
      status: 400,
      error: { code: 'invalid_value', param: 'input' },
    },
    {
      name: "in another workspace's conversation",
      context: async () => {
        const { tenant: owner } = await setup();
        const conversation = await json(
          await other.request('/v1/conversations', { key: owner.workspaceKey, body: {} }),
        );
        return { conversation: conversation.id as string };
      },
      status: 404,
      error: { code: 'conversation_not_found', param: 'conversation' },
    },
  ])('answers as the path of reads for a response $name, nothing written or called', async (refusal) => {
    const { tenant } = await setup();
    const context = await refusal.context(tenant);
    // Another tenant's setup changed the settings here: the next response reads them, and holds them again.
    for (let i = 0; i < 2; i++) expect((await create(tenant, { input: 'warm' })).status).toBe(200);
    await gateway.tasks.drain(10_000);
    const before = await tallies(tenant);
    const calls = upstream.requests.length;
    const answer = await create(tenant, { input: 'and then?', ...context, stream: true });
    expect(answer.status).toBe(refusal.status);
    expect(await errorOf(answer)).toMatchObject(refusal.error);
    expect(upstream.requests.length).toBe(calls);
    await gateway.tasks.drain(10_000);
    expect(await tallies(tenant)).toEqual(before);
  });

  it('answers 400 for a previous response still in progress, and goes on from it once it ended', async () => {
    const { tenant } = await setup();
    const gate = `in-progress-${Date.now()}`;
    const first = await json(
      await create(tenant, { input: `first\n${fakeDirective({ reply: 'Done.', hold: gate })}`, background: true }),
    );
    await waitFor(
      () => upstream.gateState(gate).waiting,
      (waiting) => waiting === 1,
    );
    const before = await tallies(tenant);
    const early = await create(tenant, { input: 'and then?', previous_response_id: first.id, stream: true });
    expect(early.status).toBe(400);
    expect(await errorOf(early)).toMatchObject({ code: 'invalid_value', param: 'previous_response_id' });
    expect(await tallies(tenant)).toEqual(before);
    upstream.openGate(gate);
    await gateway.tasks.drain(10_000);
    const later = await streamed(tenant, { input: 'and then?', previous_response_id: first.id });
    expect(deltaText(later.events)).toBe('You said: and then?');
    expect(sentOf(-1)).toEqual([`first\n${fakeDirective({ reply: 'Done.', hold: gate })}`, 'Done.', 'and then?']);
  });
});
