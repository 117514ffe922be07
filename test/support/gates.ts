/**
 * The fake provider's gates (test/support/fake-upstream.ts, a scenario's `hold`), from a test's
 * side: names, and the HTTP control requests that read and open a gate. Web APIs only, for the
 * Node tests and the workerd ones alike (fake-upstream.ts's Node server is out of workerd's reach).
 */

import { vi } from 'vitest';

/** A gate (FakeScenario's `hold`) as it stands. */
export interface GateState {
  name: string;
  open: boolean;
  /** Requests it holds now. */
  waiting: number;
  /** Requests it let through, when it opened or on arriving after. */
  passed: number;
}

/** What a gate may be named: it travels in a JSON directive and in a URL path. */
export const GATE_NAME = /^[\w.:-]{1,100}$/;

/** A gate name no other test uses (`label` and a random id), for a scenario's `hold`. */
export function freshGate(label = 'gate'): string {
  return `${label}-${crypto.randomUUID()}`;
}

/**
 * The gate `name` of the fake serving `url` (any of its URLs: only its origin is used), through
 * its HTTP control requests: for a test whose fake is in another process, or that runs in workerd.
 */
export function remoteGate(url: string, name: string) {
  const path = `${new URL(url).origin}/fake/gates/${encodeURIComponent(name)}`;
  const call = async (method: 'GET' | 'POST', to: string): Promise<GateState> => {
    const response = await fetch(to, { method });
    const state: unknown = await response.json().catch(() => undefined);
    if (!response.ok || !isGateState(state))
      throw new Error(`fake upstream: ${method} ${to} answered ${response.status}: ${JSON.stringify(state)}`);
    return state;
  };
  return { name, open: () => call('POST', `${path}/open`), state: () => call('GET', path) };
}

function isGateState(value: unknown): value is GateState {
  if (typeof value !== 'object' || value === null) return false;
  const state: Partial<Record<keyof GateState, unknown>> = value;
  return (
    typeof state.name === 'string' &&
    typeof state.open === 'boolean' &&
    Number.isInteger(state.waiting) &&
    Number.isInteger(state.passed)
  );
}

/**
 * A hold of the database proxy at `proxyUrl` (test/support/database-proxy.ts, holdContaining) on
 * the requests whose body contains `text`, through its HTTP control requests: for a test in
 * workerd, whose Worker reaches the database through that proxy.
 */
export function remoteDatabaseHold(proxyUrl: string, text: string) {
  const path = `${new URL(proxyUrl).origin}/proxy/holds/${encodeURIComponent(text)}`;
  const call = async (method: 'GET' | 'POST' | 'DELETE'): Promise<number> => {
    const response = await fetch(path, { method });
    const state: unknown = await response.json().catch(() => undefined);
    const waiting = typeof state === 'object' && state !== null && 'waiting' in state ? state.waiting : undefined;
    if (!response.ok || typeof waiting !== 'number')
      throw new Error(`database proxy: ${method} ${path} answered ${response.status}: ${JSON.stringify(state)}`);
    return waiting;
  };
  return { hold: () => call('POST'), waiting: () => call('GET'), release: () => call('DELETE') };
}

/**
 * Holds the database at the proxy (`proxyUrl`) for the requests naming `heldOn` while `start`
 * runs, until `gate` holds a provider call and a database request waits at the hold together;
 * then lets the database go. A workerd test's way to show a provider called before a write (whose
 * statements name `heldOn`) went through: one called after it never gets there. Answers the
 * promise `start` made, unawaited, for the caller to open the gate first.
 *
 * `refused` says whether the guess was refused meanwhile for a reason the test does not control
 * (another file changed the settings: the files share the database). The request then reads what
 * it needs before its call, at the hold, so the call never comes while it is held: the wait ends
 * there instead, and the caller counts the second call.
 */
export async function whileRemoteDatabaseHeld<T>(
  proxyUrl: string,
  heldOn: string,
  gate: ReturnType<typeof remoteGate>,
  start: () => Promise<T>,
  refused: () => Promise<boolean>,
): Promise<{ answer: Promise<T> }> {
  const database = remoteDatabaseHold(proxyUrl, heldOn);
  await database.hold();
  try {
    const answer = start();
    answer.catch(() => undefined);
    await vi.waitFor(
      async () => {
        if (await refused()) return;
        if ((await gate.state()).waiting !== 1) throw new Error('the provider is not called yet');
        if ((await database.waiting()) === 0) throw new Error('no database request waits at the hold yet');
      },
      { timeout: 20_000, interval: 50 },
    );
    return { answer };
  } finally {
    await database.release();
  }
}
