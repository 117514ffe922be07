import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { TextBuilder, TextParts, jsonWithText } from '../../../../src/lib/text';
import { EventStream } from '../../../../src/resources/runs/execution/event-stream';
import { Outbox } from '../../../../src/resources/runs/execution/outbox';
import { parseEvents } from '../../../support/run-stream';
import { slicesOfOnePiece } from '../../../support/slices';

/**
 * A run's way out, below the engine: the outbox of a run whose first turn began while the run's
 * rows still committed (RunHost.stream): nothing leaves and nothing is written before that commit,
 * the order holds across it, and a commit that fails leaves nothing behind; when the rows a turn
 * opens are inserted, or left to the turn's end; and the event stream itself, read as a client
 * would: backpressure, a client that stops reading, one that leaves.
 */

function deferred() {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((yes, no) => ((resolve = yes), (reject = no)));
  return { promise, resolve, reject };
}

async function received(events: EventStream): Promise<string[]> {
  await events.close();
  const text = await new Response(events.readable).text();
  return parseEvents(text).map((event) => event.event);
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('a turn begun while its run’s rows commit', () => {
  it('sends nothing and writes nothing before the commit, then everything in order', async () => {
    const commit = deferred();
    const events = new EventStream({ stallMs: 1000 });
    const outbox = new Outbox(events, commit.promise);
    const inserted: string[] = [];
    expect(outbox.queueing).toBe(true);

    const leading = outbox.send(['thread.run.created', '{}']);
    outbox.open(
      async () => void inserted.push('message'),
      () => [['thread.message.created', '{}']],
    );
    const delta = outbox.send(['thread.message.delta', '{}']);
    const written = outbox.written();
    await tick();
    expect(inserted).toEqual([]);
    expect(events.readable.locked).toBe(false);

    commit.resolve();
    await Promise.all([leading, delta, written]);
    expect(inserted).toEqual(['message']);
    await tick();
    expect(outbox.queueing).toBe(false);
    await outbox.send(['thread.run.completed', '{}']);
    expect(await received(events)).toEqual([
      'thread.run.created',
      'thread.message.created',
      'thread.message.delta',
      'thread.run.completed',
      'done',
    ]);
  });

  it('when the commit fails, every send and `written` rejects with its error, and nothing left or was written', async () => {
    const commit = deferred();
    const events = new EventStream({ stallMs: 1000 });
    const outbox = new Outbox(events, commit.promise);
    const inserted: string[] = [];
    const leading = outbox.send(['thread.run.created', '{}']);
    outbox.open(
      async () => void inserted.push('message'),
      () => [['thread.message.created', '{}']],
    );
    const delta = outbox.send(['thread.message.delta', '{}']);
    const failure = new Error('UNIQUE constraint failed: runs.thread_id');
    commit.reject(failure);
    await expect(leading).rejects.toBe(failure);
    await expect(delta).rejects.toBe(failure);
    await expect(outbox.written()).rejects.toBe(failure);
    await expect(outbox.send(['thread.run.failed', '{}'])).rejects.toBe(failure);
    expect(inserted).toEqual([]);
    expect(await received(events)).toEqual(['done']);
  });

  it('without a commit under way, sends go straight out', async () => {
    const events = new EventStream({ stallMs: 1000 });
    const outbox = new Outbox(events);
    expect(outbox.queueing).toBe(false);
    await outbox.send(['thread.run.created', '{}']);
    expect(await received(events)).toEqual(['thread.run.created', 'done']);
  });
});

describe('the rows a turn opens', () => {
  const DELAY_MS = 10;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** An outbox whose rows wait DELAY_MS after their announcement, and the inserts it started. */
  function outboxOfRows() {
    const events = new EventStream({ stallMs: 1000 });
    const outbox = new Outbox(events, undefined, DELAY_MS);
    const inserted: string[] = [];
    const open = (name: string) =>
      outbox.open(
        async () => void inserted.push(name),
        () => [[`${name}.created`, '{}']],
      );
    return { events, outbox, inserted, open };
  }

  it('are inserted once their announcement has left and the delay has passed, without being asked', async () => {
    const { outbox, inserted, open } = outboxOfRows();
    open('message');
    await outbox.send(['thread.message.delta', '{}']);
    expect(inserted).toEqual([]);
    for (let waited = 0; inserted.length === 0 && waited < 5_000; waited += DELAY_MS) await sleep(DELAY_MS);
    expect(inserted).toEqual(['message']);
    // Started once: a write that needs them now only waits for it.
    await outbox.written();
    expect(inserted).toEqual(['message']);
  });

  it('taken by the turn before their insert started, are left to it: announced all the same, never inserted here', async () => {
    const { events, outbox, inserted, open } = outboxOfRows();
    const message = open('message');
    await outbox.send(['thread.message.delta', '{}']);
    expect(outbox.take(message)).toBe(true);
    // Not announced yet when taken: its announcement still leaves with the next send.
    const step = open('step');
    expect(outbox.take(step)).toBe(true);
    await outbox.send(['thread.run.step.delta', '{}']);
    await sleep(DELAY_MS * 5);
    await outbox.written();
    expect(inserted).toEqual([]);
    expect(outbox.take(message)).toBe(false);
    expect(await received(events)).toEqual([
      'message.created',
      'thread.message.delta',
      'step.created',
      'thread.run.step.delta',
      'done',
    ]);
  });

  it('taken by a commit that then fails, are given back: inserted as they were opened before anything else is written', async () => {
    const { outbox, inserted, open } = outboxOfRows();
    const message = open('message');
    await outbox.send(['thread.message.delta', '{}']);
    expect(outbox.take(message)).toBe(true);
    outbox.failCommit();
    await outbox.written();
    expect(inserted).toEqual(['message']);
    // A commit that ran, whether it changed the run or not, wrote them: nothing is given back.
    const step = open('step');
    expect(outbox.take(step)).toBe(true);
    outbox.discardCommit();
    outbox.failCommit();
    await outbox.written();
    expect(inserted).toEqual(['message']);
  });

  it('cannot be taken once their insert has started: a write that needed them started it', async () => {
    const { outbox, inserted, open } = outboxOfRows();
    const message = open('message');
    await outbox.send(['thread.message.delta', '{}']);
    await outbox.written();
    expect(inserted).toEqual(['message']);
    expect(outbox.take(message)).toBe(false);
  });
});

describe('the event stream towards its client', () => {
  it('lets go of a client that makes no room within stallMs: the stream errors and later events are dropped', async () => {
    const events = new EventStream({ stallMs: 50 });
    // 64 events fill the queue; the 65th waits for room that never comes.
    for (let i = 0; i < 64; i++) await events.send([['thread.message.delta', `{"i":${i}}`]]);
    expect(events.detached).toBe(false);
    const started = performance.now();
    await events.send([['thread.message.delta', '{"i":64}']]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    expect(events.detached).toBe(true);
    await events.close();
    await expect(new Response(events.readable).text()).rejects.toThrow('the client stopped reading the stream');
  });

  it('keeps a client that read while this process was held past stallMs: the stall is judged after the I/O that came meanwhile', async () => {
    const events = new EventStream({ stallMs: 50 });
    for (let i = 0; i < 64; i++) await events.send([['thread.message.delta', `{"i":${i}}`]]);
    const reader = events.readable.getReader();
    // The client's read arrives as I/O (a message from a thread of its own), 20 ms into a stall
    // of 200 ms of this event loop, which begins once the 65th event waits for room.
    const client = new Worker(
      'const { parentPort } = require("node:worker_threads"); parentPort.on("message", () => { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20); parentPort.postMessage("read"); }); parentPort.postMessage("ready");',
      { eval: true },
    );
    await new Promise((resolve) => client.once('message', resolve));
    client.once('message', () => void reader.read());
    const waiting = events.send([['thread.message.delta', '{"i":64}']]);
    await new Promise((resolve) => setImmediate(resolve));
    client.postMessage('go');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    await waiting;
    await client.terminate();
    expect(events.detached).toBe(false);
    const readRest = async () => {
      let text = '';
      for (let read = await reader.read(); !read.done; read = await reader.read())
        text += new TextDecoder().decode(read.value);
      return text;
    };
    const [rest] = await Promise.all([readRest(), events.close()]);
    // The client's read took the 64 events written before it (one chunk); then the 65th and done.
    expect(parseEvents(rest).map((event) => event.data)).toEqual([{ i: 64 }, '[DONE]']);
  });

  it('goes on once the client reads, in order', async () => {
    const events = new EventStream({ stallMs: 5_000 });
    const sending = (async () => {
      for (let i = 0; i < 200; i++) await events.send([['thread.message.delta', `{"i":${i}}`]]);
      await events.close();
    })();
    const parsed = parseEvents(await new Response(events.readable).text());
    await sending;
    expect(parsed.map((event) => event.event)).toEqual([
      ...Array.from({ length: 200 }, () => 'thread.message.delta'),
      'done',
    ]);
    expect(parsed.slice(0, 200).map((event) => (event.data as { i: number }).i)).toEqual(
      Array.from({ length: 200 }, (_, i) => i),
    );
  });

  it('writes an event in parts (a long answer’s message) as the same bytes, in chunks of at most 64 KiB, the text from its own buffers', async () => {
    const answer = new TextBuilder();
    for (let i = 0; i < 300; i++) answer.push(`${i} "quoted" é ${'x'.repeat(1000)}\n`);
    const message = (value: string) => ({
      id: 'msg_1',
      object: 'thread.message',
      content: [{ type: 'text', text: { value, annotations: [] } }],
    });
    const events = new EventStream({ stallMs: 5_000 });
    const reading = (async () => {
      const chunks: Uint8Array[] = [];
      for await (const chunk of events.readable) chunks.push(chunk);
      return chunks;
    })();
    await events.send([
      ['thread.run.step.completed', '{"id":"step_1"}'],
      ['thread.message.completed', jsonWithText(message, answer)],
      ['thread.run.completed', { id: 'run_1' }],
    ]);
    await events.close();
    const chunks = await reading;
    // Nothing larger than 64 KiB; the answer's text leaves from the buffers of 16 KiB and more its
    // builder holds it in, not from copies.
    expect(chunks.length).toBeGreaterThanOrEqual(6);
    expect(chunks.every((chunk) => chunk.byteLength <= 64 * 1024)).toBe(true);
    const stored = answer
      .jsonParts()
      .filter((part): part is Uint8Array => typeof part !== 'string' && part.byteLength >= 16 * 1024);
    expect(stored.length).toBeGreaterThanOrEqual(3);
    for (const part of stored) expect(chunks.filter((chunk) => chunk.buffer === part.buffer)).toHaveLength(1);
    const text = new TextDecoder().decode(Buffer.concat(chunks));
    expect(text).toBe(
      `event: thread.run.step.completed\ndata: {"id":"step_1"}\n\nevent: thread.message.completed\ndata: ${JSON.stringify(message(answer.toString()))}\n\n` +
        'event: thread.run.completed\ndata: {"id":"run_1"}\n\nevent: done\ndata: [DONE]\n\n',
    );
    expect(parseEvents(text).map((event) => event.event)).toEqual([
      'thread.run.step.completed',
      'thread.message.completed',
      'thread.run.completed',
      'done',
    ]);
    // Parts given as they are: strings and bytes, in order.
    const parted = new EventStream({ stallMs: 5_000 });
    await parted.send([['x', new TextParts(['{"a":"', new TextEncoder().encode('é'), '"}'])]]);
    expect(await received(parted)).toEqual(['x', 'done']);
  });

  it("copies and writes a long event's chunks a slice at a time: the event loop's turns come between them", async () => {
    const answer = new TextBuilder();
    for (let i = 0; i < 300; i++) answer.push(`${i} ${'x'.repeat(1000)}\n`);
    // Slices of one chunk each: spent once a chunk is written, fresh after each wait.
    const log: string[] = [];
    const oneChunkEach = slicesOfOnePiece(log, { firstSpent: false });
    const events = new EventStream({ stallMs: 5_000, slices: oneChunkEach });
    const reading = (async () => {
      for await (const chunk of events.readable) log.push(`chunk ${chunk.byteLength}`);
    })();
    await events.send([['thread.message.completed', jsonWithText((value) => ({ text: value }), answer)]]);
    await events.close();
    await reading;
    const chunks = log.filter((entry) => entry.startsWith('chunk')).length - 1; // `done` is written apart
    expect(chunks).toBeGreaterThanOrEqual(5);
    // A wait before every chunk of the event but its first, which the fresh slice took.
    expect(log.filter((entry) => entry === 'wait')).toHaveLength(chunks - 1);
  });

  it('hands on what was written between two reads as one chunk: the first event at once, the rest at the next read', async () => {
    const events = new EventStream({ stallMs: 5_000 });
    const reader = events.readable.getReader();
    const first = reader.read();
    await tick(); // the read has asked
    // A provider read of several tokens: sends one after another, with no read in between.
    for (let i = 0; i < 10; i++) void events.send([['thread.message.delta', `{"i":${i}}`]]);
    const decode = (read: { value?: Uint8Array }) => new TextDecoder().decode(read.value);
    expect(parseEvents(decode(await first)).map((event) => event.data)).toEqual([{ i: 0 }]);
    expect(parseEvents(decode(await reader.read())).map((event) => event.data)).toEqual(
      Array.from({ length: 9 }, (_, i) => ({ i: i + 1 })),
    );
    // Never past 64 KiB joined: two events of 40 KiB go on apart.
    const large = `{"x":"${'x'.repeat(40 * 1024)}"}`;
    void events.send([['a', large]]);
    void events.send([['b', large]]);
    expect(parseEvents(decode(await reader.read())).map((event) => event.event)).toEqual(['a']);
    expect(parseEvents(decode(await reader.read())).map((event) => event.event)).toEqual(['b']);
    await reader.cancel();
  });

  it('drops events once the client cancels', async () => {
    const events = new EventStream({ stallMs: 5_000 });
    await events.send([['thread.run.created', '{}']]);
    await events.readable.cancel();
    expect(events.detached).toBe(true);
    await events.send([['thread.run.completed', '{}']]);
    await events.close();
  });
});
