import { messageObject } from '../threads/objects';
import type { MessageRow, ThreadKey } from '../threads/queries';
import { fromMessageJson } from '../threads/wire';

/**
 * The messages a streamed run wrote, read from its event stream as it passes to its client: where
 * the run's answer is seen on both runtimes (on Workers the run executes in another isolate, whose
 * stream the request's relays). `learned` is told once, before the client is sent the event that
 * ends the run: the messages its `thread.message.completed` events carried, in their order, when
 * the run ended `completed` having called no tool; null when it ended otherwise, when its events
 * were not all seen, or an event was larger than MAX_EVENT_CHARS. A stream its client left is
 * never told of: the thread stays answered by the run (KnownHistories.answering) until the next
 * write to it or run on it forgets it. The bytes pass through unchanged; the watch holds at most
 * one event's text.
 */
export function watchAnswer(
  events: ReadableStream<Uint8Array>,
  run: { id: string; thread: ThreadKey },
  learned: (messages: MessageRow[] | null) => void,
): ReadableStream<Uint8Array> {
  const watch = new AnswerWatch(run, learned);
  const reader = events.getReader();
  // Pulled chunk by chunk, none queued here: a TransformStream's pipe cost three times as much CPU
  // a chunk (Node, 64 deltas), which every streamed run would pay.
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) {
          watch.end();
          controller.close();
          return;
        }
        watch.push(value);
        controller.enqueue(value);
      },
      cancel(reason) {
        watch.end();
        return reader.cancel(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

/**
 * The most characters of one event the watch holds, and of the messages it learns: more than a
 * known history's bytes (KnownHistories' MAX_BYTES of content) take as events.
 */
export const MAX_EVENT_CHARS = 64 * 1024;

/** The events that end a run, but `thread.run.completed`. */
const OTHER_ENDS = new Set([
  'thread.run.requires_action',
  'thread.run.incomplete',
  'thread.run.failed',
  'thread.run.cancelling',
  'thread.run.cancelled',
  'thread.run.expired',
  'error',
]);

class AnswerWatch {
  readonly #decoder = new TextDecoder();
  /** The text after the last whole event (`event: <name>\ndata: <json>\n\n`, event-stream.ts). */
  #pending = '';
  /** The name of the event being read whose text was let go as too long; only its end is looked for. */
  #skipping: string | null = null;
  readonly #messages: MessageRow[] = [];
  /** The characters of the message events `#messages` were read from. */
  #chars = 0;
  #told = false;

  constructor(
    readonly run: { id: string; thread: ThreadKey },
    readonly learned: (messages: MessageRow[] | null) => void,
  ) {}

  push(chunk: Uint8Array): void {
    if (this.#told || (this.#pending === '' && this.#skipping === null && isOneDelta(chunk))) return;
    this.#pending += this.#decoder.decode(chunk, { stream: true });
    for (let end = this.#pending.indexOf('\n\n'); end !== -1 && !this.#told; end = this.#pending.indexOf('\n\n')) {
      const text = this.#pending.slice(0, end);
      this.#pending = this.#pending.slice(end + 2);
      const skipped = this.#skipping;
      this.#skipping = null;
      if (skipped === null) this.#event(nameOf(text), text);
      else this.#event(skipped, null);
    }
    if (this.#told || this.#pending.length <= MAX_EVENT_CHARS) return;
    // An event this long: only its name is kept (a message this long is not learned).
    this.#skipping ??= nameOf(this.#pending);
    // Its last character kept: it may be the first of the two that end it.
    this.#pending = this.#pending.slice(-1);
  }

  /** The stream ended or its client went away: what was not told by now is not known. */
  end(): void {
    this.#tell(null);
  }

  #event(name: string, text: string | null): void {
    if (name === 'thread.message.completed') {
      const message = text === null ? null : messageOf(text);
      if (message?.run_id !== this.run.id || message.thread_id !== this.run.thread.id) return this.#tell(null);
      this.#chars += text?.length ?? 0;
      // More than a thread's known history holds: not learned.
      if (this.#chars > MAX_EVENT_CHARS) return this.#tell(null);
      this.#messages.push(fromMessageJson(message, this.run.thread.workspaceId));
    } else if (name === 'thread.message.incomplete' || (name === 'thread.run.step.created' && calledTools(text))) {
      this.#tell(null);
    } else if (name === 'thread.run.completed') {
      this.#tell(this.#messages);
    } else if (OTHER_ENDS.has(name)) {
      this.#tell(null);
    }
  }

  #tell(messages: MessageRow[] | null): void {
    if (this.#told) return;
    this.#told = true;
    this.#pending = '';
    this.learned(messages);
  }
}

/** The name of the event whose text starts `text`. */
function nameOf(text: string): string {
  const line = text.indexOf('\n');
  return text.startsWith('event: ') ? text.slice(7, line === -1 ? undefined : line) : '';
}

/** The message of a `thread.message.completed` event's text, or null when it is not one. */
function messageOf(text: string) {
  const data = text.indexOf('\ndata: ');
  if (data === -1) return null;
  try {
    const parsed = messageObject().safeParse(JSON.parse(text.slice(data + 7)));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Whether a step's event (null: too long to hold) is of tool calls, which a later prompt shows. */
function calledTools(text: string | null): boolean {
  return text === null || text.includes('"type":"tool_calls"');
}

const DELTA = new TextEncoder().encode('event: thread.message.delta\n');

/**
 * Whether `chunk`, which starts at an event's start, is one `thread.message.delta` event whole (its
 * name's line, its data's line, the empty line): most of a run's chunks, let pass unread. A data
 * line holds no line break (JSON escapes them), so its end is the chunk's second one.
 */
function isOneDelta(chunk: Uint8Array): boolean {
  const end = chunk.length - 2;
  if (end < DELTA.length || chunk[end] !== 10 || chunk[end + 1] !== 10) return false;
  for (let i = 0; i < DELTA.length; i++) if (chunk[i] !== DELTA[i]) return false;
  return chunk.indexOf(10, DELTA.length) === end;
}
