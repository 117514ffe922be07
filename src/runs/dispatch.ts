import type { Deps } from '../deps';
import { executeRun } from './engine';

/** Runs a dispatched run in this process, as background work (see Deps.dispatchRun). */
export const dispatchInProcess: Deps['dispatchRun'] = (c, run, preloaded) => {
  const { deps } = c.var;
  deps.background(c, executeRun(deps, run, { preloaded }));
};
