import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { RecordedRequest } from './fake-upstream';
import { defined } from './defined';
import { waitFor } from './wait';

/**
 * An HTTP proxy in front of a libSQL server (sqld): each HTTP request to the database is one round
 * trip (a statement, a batch, or one step of a transaction). It counts them, can hold each one
 * `delayMs` (the distance to a Turso primary: bench/round-trips.ts), and keeps each one's
 * statements (the start of their SQL) when asked to.
 */
export class DatabaseProxy {
  delayMs = 0;
  /** Round trips begun: requests that reached the proxy. */
  count = 0;
  /** Round trips answered: requests whose answer the proxy has handed back whole (or failed). */
  answered = 0;
  /** Each round trip's statements (their SQL's start), kept while `keepStatements` is set. */
  readonly statements: string[][] = [];
  keepStatements = false;
  /** The database's URL: set before the first request (a test harness may start its own). */
  target: URL | undefined;
  /** Requests held by `hold()` and not forwarded yet. */
  waiting = 0;
  #held: Promise<void> | null = null;
  /** Holds by the text a held request's body contains (holdContaining), and the requests each holds. */
  readonly #holdsByText = new Map<string, { held: Promise<void>; release: () => void; waiting: number }>();
  #inFlight = 0;
  #lastActivity = performance.now();
  readonly #server: Server;
  readonly #quietMs: number;

  private constructor(quietMs: number) {
    this.#quietMs = quietMs;
    this.#server = createServer((incoming, outgoing) => this.#forward(incoming, outgoing));
  }

  /** A proxy on a free loopback port; `quietMs`: how long the database must have had nothing for `quiet()`. */
  static async start(options: { target?: string; quietMs?: number } = {}): Promise<DatabaseProxy & { url: string }> {
    const proxy = new DatabaseProxy(options.quietMs ?? 400);
    if (options.target) proxy.target = new URL(options.target);
    await new Promise<void>((resolve) => proxy.#server.listen(0, '127.0.0.1', resolve));
    const address = proxy.#server.address();
    if (typeof address !== 'object' || address === null) throw new Error('the proxy has no address');
    return Object.assign(proxy, { url: `http://127.0.0.1:${address.port}` });
  }

  /** Resolves once no request is in flight and none has arrived for the proxy's quiet time. */
  async quiet(): Promise<void> {
    for (;;) {
      const idle = performance.now() - this.#lastActivity;
      if (this.#inFlight === 0 && idle >= this.#quietMs) return;
      await new Promise((resolve) => setTimeout(resolve, Math.max(10, this.#quietMs - idle)));
    }
  }

  /**
   * Holds every request that arrives from now on, forwarding none, until the function answered is
   * called: a test's way to keep a write in flight while it looks at what happens meanwhile.
   */
  hold(): () => void {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    this.#held = held;
    return () => {
      if (this.#held === held) this.#held = null;
      release();
    };
  }

  /**
   * Holds the requests whose body contains `text` (a thread's id: the statements about it), from now
   * until `release(text)`, forwarding the others: for a test that shares the database with others
   * running beside it (the workerd tests). Also over HTTP, for a test that cannot reach this object
   * (a Worker's, in workerd): `POST /proxy/holds/{text}`, `GET` (how many it holds), `DELETE` (release).
   */
  holdContaining(text: string): void {
    if (this.#holdsByText.has(text)) return;
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    this.#holdsByText.set(text, { held, release, waiting: 0 });
  }

  /** How many requests the hold of `text` holds now (0: none, or no such hold). */
  heldContaining(text: string): number {
    return this.#holdsByText.get(text)?.waiting ?? 0;
  }

  /** Ends the hold of `text`: the requests it held go on. */
  release(text: string): void {
    this.#holdsByText.get(text)?.release();
    this.#holdsByText.delete(text);
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #forward(incoming: IncomingMessage, outgoing: ServerResponse) {
    const control = HOLD_PATH.exec(incoming.url ?? '');
    if (control) return this.#control(incoming.method, decodeURIComponent(defined(control[1])), outgoing);
    this.count++;
    this.#inFlight++;
    this.#lastActivity = performance.now();
    const chunks: Buffer[] = [];
    const forward = () => this.#send(incoming, outgoing, chunks);
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      if (this.keepStatements) this.statements.push(statementsOf(Buffer.concat(chunks)));
      const held = this.#held;
      const body = this.#holdsByText.size > 0 ? Buffer.concat(chunks).toString('utf8') : '';
      const byText = [...this.#holdsByText].find(([text]) => body.includes(text))?.[1];
      if (held) {
        this.waiting++;
        void held.then(() => {
          this.waiting--;
          forward();
        });
      } else if (byText) {
        byText.waiting++;
        void byText.held.then(() => {
          byText.waiting--;
          forward();
        });
      } else forward();
    });
  }

  /** A hold's control request (holdContaining): answers `{ waiting }`. */
  #control(method: string | undefined, text: string, outgoing: ServerResponse) {
    if (method === 'POST') this.holdContaining(text);
    else if (method === 'DELETE') this.release(text);
    outgoing.writeHead(200, { 'content-type': 'application/json' });
    outgoing.end(JSON.stringify({ waiting: this.heldContaining(text) }));
  }

  /** Sends the request on to the database after the delay. */
  #send(incoming: IncomingMessage, outgoing: ServerResponse, chunks: Buffer[]) {
    setTimeout(() => {
      const target = this.target;
      if (!target) {
        outgoing.destroy(new Error('the proxy has no database behind it'));
        this.#done();
        return;
      }
      const upstream = httpRequest(
        {
          host: target.hostname,
          port: target.port,
          method: incoming.method,
          path: incoming.url,
          headers: { ...incoming.headers, host: target.host },
        },
        (answer) => {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(outgoing);
          answer.on('end', () => this.#done());
        },
      );
      upstream.on('error', (error) => {
        outgoing.destroy(error);
        this.#done();
      });
      upstream.end(Buffer.concat(chunks));
    }, this.delayMs);
  }

  #done() {
    this.answered++;
    this.#inFlight--;
    this.#lastActivity = performance.now();
  }
}

const HOLD_PATH = /^\/proxy\/holds\/([^/?]+)$/;

/** The SQL (its first 80 characters) in a Hrana pipeline's body, whatever its nesting (execute, batch steps). */
function statementsOf(body: Buffer): string[] {
  const found: string[] = [];
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(visit);
    else if (typeof value === 'object' && value !== null)
      for (const [key, inner] of Object.entries(value)) {
        if (key === 'sql' && typeof inner === 'string') found.push(inner.replace(/\s+/g, ' ').slice(0, 80));
        else visit(inner);
      }
  };
  try {
    visit(JSON.parse(body.toString('utf8')));
  } catch {
    found.push(`(${body.length} bytes, not JSON)`);
  }
  return found;
}

/**
 * Holds the database at `proxy` while `start` runs, until `provider` has been called once more
 * (and, with `answered`, has sent that whole answer) while a database request waits at the hold;
 * then lets the database go. Answers what `start` answered, what was seen then, and the
 * provider's calls since: a test's way to show a provider called before the database answered. A
 * request that calls its provider only after the database answers never gets there, and the wait
 * fails. Both are waited for, not the call alone: the request to the database may still be on its
 * way to the proxy when the provider records its call (seen under load).
 */
export async function whileDatabaseHeld<T>(
  proxy: DatabaseProxy,
  provider: { requests: RecordedRequest[] },
  start: () => Promise<T>,
  options: { answered?: boolean } = {},
) {
  const before = provider.requests.length;
  const release = proxy.hold();
  try {
    const pending = start();
    pending.catch(() => undefined);
    const seen = await waitFor(
      () => ({
        called: provider.requests.length - before,
        outcome: provider.requests[before]?.outcome,
        waiting: proxy.waiting,
      }),
      (state) => state.called >= 1 && state.waiting > 0 && (!options.answered || state.outcome === 'completed'),
    );
    release();
    return { seen, answer: await pending, calls: provider.requests.slice(before) };
  } finally {
    release();
  }
}
