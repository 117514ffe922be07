import type { Slices } from '../../src/lib/slices';

/**
 * Slices of one piece of work each: spent once a piece has looked, fresh again after each wait,
 * which is logged as 'wait'. `firstSpent`: the slice is spent already when the work arrives.
 */
export function slicesOfOnePiece(log: string[], options: { firstSpent: boolean }): Slices {
  let fresh = !options.firstSpent;
  return {
    spent: () => {
      if (!fresh) return true;
      fresh = false;
      return false;
    },
    next: async () => {
      log.push('wait');
      fresh = true;
    },
  };
}
