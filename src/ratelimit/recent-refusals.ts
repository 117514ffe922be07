import { BoundedMap } from '../lib/bounded-map';
import { MAX_REFUSALS, type Refusal } from './counter-store';

/** Policies whose refusals a process holds at once: past this, those refused least recently are forgotten. */
export const MAX_POLICIES_WITH_REFUSALS = 1000;

/**
 * Refusals held in memory, the last MAX_REFUSALS of each of the MAX_POLICIES_WITH_REFUSALS
 * policies refused most recently: at most 20,000 records of a few hundred bytes (a group's text is
 * at most 128 characters before it is hashed), whatever a flood of refused requests does. The
 * libSQL store's buffer of refusals not yet written (stored-refusals.ts).
 */
export class RecentRefusals {
  readonly #byPolicy = new BoundedMap<string, Refusal[]>(MAX_POLICIES_WITH_REFUSALS);

  note(policyId: string, refusal: Refusal): void {
    const kept = this.#byPolicy.get(policyId) ?? [];
    // Deleted and set again: the map forgets the policy refused least recently first.
    this.#byPolicy.delete(policyId);
    kept.unshift(refusal);
    if (kept.length > MAX_REFUSALS) kept.length = MAX_REFUSALS;
    this.#byPolicy.set(policyId, kept);
  }

  /** Newest first. */
  of(policyId: string): Refusal[] {
    return [...(this.#byPolicy.get(policyId) ?? [])];
  }

  /** Each policy's refusals, newest first, the policy refused least recently first. */
  entries(): IterableIterator<[string, Refusal[]]> {
    return this.#byPolicy.entries();
  }

  get size(): number {
    return this.#byPolicy.size;
  }
}
