/**
 * The order of a thread as it happened: its messages, and where a run called tools, its tool
 * steps. One order for whatever reads a thread whole: a run's prompt
 * (resources/runs/execution/prompt.ts) and a conversation's items (resources/conversations/).
 *
 * Messages are in the thread's order. A run's tool steps go just before the next message the run
 * wrote after them (its answer once it had the outputs); when it wrote none after them, just after
 * the last one it wrote; and when it wrote none at all (it failed or was cancelled once it had the
 * outputs, or it is a response that ended on its calls), after the messages that were in the
 * thread when it was created. Tool steps whose message is not among `messages` (left out of a
 * history as too old) are left out with it.
 */

/** A step of one of the thread's runs, as the order needs it. */
export interface TimelineStep {
  runId: string;
  /** When its run was created (ms): where a run that wrote no message goes. */
  runCreatedAt: number;
}

/** One place in the order: a message, or a tool step. */
export type TimelineEntry<Message, Step> = { message: Message; step?: never } | { step: Step; message?: never };

/**
 * `messages` (oldest first) and `steps` (each run's in the order they happened) in the thread's
 * order. `createdMessage` says which message a step created (a message_creation step), or null for
 * a tool step; the caller gives only the tool steps it places (the prompt: those completed, with
 * calls).
 */
export function timeline<Message extends { id: string; createdAt: number }, Step extends TimelineStep>(
  messages: readonly Message[],
  steps: readonly Step[],
  createdMessage: (step: Step) => string | null,
): TimelineEntry<Message, Step>[] {
  const before = new Map<string, Step[]>();
  const after = new Map<string, Step[]>();
  const unanchored: { at: number; steps: Step[] }[] = [];
  for (const runSteps of byRun(steps)) {
    const createdAt = runSteps[0]?.runCreatedAt ?? 0;
    let pending: Step[] = [];
    let lastMessage: string | null = null;
    for (const step of runSteps) {
      const created = createdMessage(step);
      if (created !== null) {
        if (pending.length > 0) before.set(created, pending);
        pending = [];
        lastMessage = created;
      } else {
        pending.push(step);
      }
    }
    if (pending.length === 0) continue;
    if (lastMessage !== null) after.set(lastMessage, pending);
    else unanchored.push({ at: createdAt, steps: pending });
  }
  unanchored.sort((a, b) => a.at - b.at);

  const entries: TimelineEntry<Message, Step>[] = [];
  const push = (list: readonly Step[] | undefined) => {
    for (const step of list ?? []) entries.push({ step });
  };
  let next = 0;
  const unanchoredBefore = (at: number) => {
    for (let group = unanchored[next]; group !== undefined && group.at < at; group = unanchored[++next])
      push(group.steps);
  };
  for (const message of messages) {
    unanchoredBefore(message.createdAt);
    push(before.get(message.id));
    entries.push({ message });
    push(after.get(message.id));
  }
  unanchoredBefore(Infinity);
  return entries;
}

/** The steps of each run, in their order (Map.groupBy, which Node 20 does not have). */
function byRun<Step extends TimelineStep>(steps: readonly Step[]): Step[][] {
  const runs = new Map<string, Step[]>();
  for (const step of steps) {
    const list = runs.get(step.runId);
    if (list) list.push(step);
    else runs.set(step.runId, [step]);
  }
  return [...runs.values()];
}
