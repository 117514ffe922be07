import { DurableObject } from 'cloudflare:workers';
import { executeRun } from '../runs/engine';
import { reconcileRun } from '../runs/recovery';
import { settleRun } from '../runs/settle';
import { getRunById } from '../services/runs';
import { workerDeps, type Env } from '../worker-runtime';

/**
 * Where a non-streamed run executes on Workers (Deps.dispatchRun): one object per run, named by the
 * run's id, executing it in an alarm. A Worker's `waitUntil` lasts only 30 seconds past its
 * response; an alarm handler may run for 15 minutes of wall time, longer than a run lives
 * (GATEWAY_RUN_EXPIRES_AFTER_SECONDS, 10 minutes by default).
 *
 * At most once: the object forgets the run before executing it, so an alarm retried after a crash
 * mid-run does not call the provider a second time; the run's lease runs out instead and recovery
 * fails it, as on Node. Failures before that point (the database unreachable) throw, and the
 * platform retries the alarm with the run still remembered.
 */
export class RunExecutor extends DurableObject<Env> {
  /** Takes a run its caller put in progress: remembered, then executed by an alarm set for now. */
  async start(runId: string): Promise<void> {
    this.ctx.storage.kv.put('run_id', runId);
    await this.ctx.storage.setAlarm(Date.now());
  }

  override async alarm(): Promise<void> {
    const runId = this.ctx.storage.kv.get<string>('run_id');
    if (runId === undefined) return;
    const deps = await workerDeps(this.env);
    const run = await getRunById(deps.db, runId);
    // Nothing is kept once the run is taken: an object with empty storage costs nothing.
    await this.ctx.storage.deleteAll();
    if (!run) return;
    if (run.status === 'cancelling') {
      // Cancelled before it started: nobody else will settle it.
      await settleRun(deps, run.id, ['cancelling'], { status: 'cancelled' });
    } else if (run.status === 'in_progress') {
      // A lease that ran out before the alarm fired: recovery may already be failing the run.
      const current = await reconcileRun(deps, run);
      if (current === run) await executeRun(deps, run);
    }
  }
}
