import { describe, expect, it } from 'vitest';
import { MAX_TRACE_ATTEMPTS, MAX_TRACE_TEXT, TraceRecorder } from '../../../../src/resources/runs/execution/trace';

/** A run's trace stays bounded whatever a run does: its last attempts, each text cut. */
describe('TraceRecorder', () => {
  it('keeps the last MAX_TRACE_ATTEMPTS attempts and counts them all', () => {
    let now = 1000;
    const recorder = new TraceRecorder(null, () => now);
    for (let i = 0; i < MAX_TRACE_ATTEMPTS + 5; i++) {
      const attempt = recorder.begin(`key-${i}`, 'model');
      const timer = attempt.timer()();
      now += 3;
      timer.firstByte();
      now += 4;
      timer.end(i % 2 ? 'ok' : 'http_5xx');
      timer.end('aborted');
    }
    const trace = recorder.snapshot({ virtualKey: 'k', firstTokenMs: 12, cause: 'x'.repeat(1000) });
    expect(trace.attempts).toHaveLength(MAX_TRACE_ATTEMPTS);
    expect(trace.attempts_total).toBe(MAX_TRACE_ATTEMPTS + 5);
    expect(trace.attempts[0]?.virtual_key).toBe('key-5');
    // Only the first end counts.
    expect(trace.attempts[0]).toMatchObject({ first_byte_ms: 3, duration_ms: 7, outcome: 'ok' });
    expect(trace.cause).toHaveLength(MAX_TRACE_TEXT);
  });

  it('cuts long slugs and models, and goes on from the attempts a run kept', () => {
    const first = new TraceRecorder(null, () => 0);
    first.begin('s'.repeat(500), 'm'.repeat(500));
    const kept = first.snapshot();
    expect(kept.attempts[0]?.virtual_key).toHaveLength(MAX_TRACE_TEXT);
    expect(kept.attempts[0]?.model).toHaveLength(MAX_TRACE_TEXT);
    const next = new TraceRecorder(kept, () => 0);
    next.begin('b', 'm');
    expect(next.snapshot().attempts_total).toBe(2);
  });

  it('tells the metrics timer it wraps everything', () => {
    const told: string[] = [];
    const attempt = new TraceRecorder(null, () => 0).begin('k', 'm');
    const timer = attempt.timer(() => ({ firstByte: () => told.push('first'), end: (o) => told.push(o) }))();
    timer.firstByte();
    timer.end('timeout');
    expect(told).toEqual(['first', 'timeout']);
  });
});
