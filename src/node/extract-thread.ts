import { Worker } from 'node:worker_threads';
import { HTML_OPTIONS, type Parsers } from '../retrieval/extract';

/**
 * HTML and DOCX parsed on a thread of their own (extract-worker.js), so that a large document
 * never holds the event loop that serves every tenant's requests. One thread, started when first
 * needed and not keeping the process alive; documents queue on it. A parse past `timeoutMs`, or
 * one that takes the thread past its heap limit (a zip bomb of a DOCX), ends the thread: that
 * document is refused, the ones queued behind it are too, and the next starts a new thread.
 */
export function threadParsers(options: { timeoutMs: number; maxHeapMb: number }): Parsers {
  let worker: Worker | null = null;
  let next = 0;
  const pending = new Map<number, { resolve: (text: string) => void; reject: (error: Error) => void; timer: ReturnType<typeof setTimeout> }>();

  const stop = (worker_: Worker, why: string) => {
    if (worker === worker_) worker = null;
    void worker_.terminate();
    for (const [id, waiting] of pending) {
      clearTimeout(waiting.timer);
      waiting.reject(new Error(why));
      pending.delete(id);
    }
  };

  const thread = (): Worker => {
    if (worker) return worker;
    const started = new Worker(new URL('./extract-worker.js', import.meta.url), { resourceLimits: { maxOldGenerationSizeMb: options.maxHeapMb } });
    started.on('message', (answer: { id: number; text?: string; error?: string }) => {
      const waiting = pending.get(answer.id);
      if (!waiting) return;
      pending.delete(answer.id);
      clearTimeout(waiting.timer);
      if (answer.text !== undefined) waiting.resolve(answer.text);
      else waiting.reject(new Error(answer.error ?? 'the parser failed'));
    });
    started.on('error', (error) => stop(started, `the parser stopped: ${error.message}`));
    started.on('exit', () => stop(started, 'the parser stopped'));
    // After the listeners: adding a 'message' listener refs the thread's port again.
    started.unref();
    worker = started;
    return started;
  };

  const parse = (message: { kind: 'html'; text: string; options: typeof HTML_OPTIONS } | { kind: 'docx'; bytes: Uint8Array }) =>
    new Promise<string>((resolve, reject) => {
      const id = next++;
      const current = thread();
      const timer = setTimeout(() => stop(current, `parsing took longer than ${options.timeoutMs / 1000} s`), options.timeoutMs);
      pending.set(id, { resolve, reject, timer });
      current.postMessage({ id, ...message });
    });

  return {
    html: (text) => parse({ kind: 'html', text, options: HTML_OPTIONS }),
    docx: (bytes) => parse({ kind: 'docx', bytes }),
  };
}
