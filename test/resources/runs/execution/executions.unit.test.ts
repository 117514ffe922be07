import { describe, expect, it } from 'vitest';
import { RunExecutions, RunStopped } from '../../../../src/resources/runs/execution/executions';

describe('the runs executing here (Deps.executions)', () => {
  it('stops every execution of a run on its cancel: two submissions of its outputs at once each began one', () => {
    const executions = new RunExecutions();
    const [winner, loser, other] = [new AbortController(), new AbortController(), new AbortController()];
    executions.add('run_a', winner);
    executions.add('run_a', loser);
    executions.add('run_b', other);
    executions.cancel('run_a');
    expect([winner.signal.aborted, loser.signal.aborted, other.signal.aborted]).toEqual([true, true, false]);
    expect(winner.signal.reason).toBeInstanceOf(RunStopped);
  });

  it('still stops the one left once the other is forgotten, whichever began last', () => {
    const executions = new RunExecutions();
    const [winner, loser] = [new AbortController(), new AbortController()];
    executions.add('run_a', winner);
    executions.add('run_a', loser);
    // The loser's write failed: its execution ends and is forgotten.
    executions.remove('run_a', loser);
    executions.cancel('run_a');
    expect(winner.signal.aborted).toBe(true);
    expect(loser.signal.aborted).toBe(false);
  });
});
