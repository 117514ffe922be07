/** The database keeps milliseconds; Assistants objects speak Unix seconds. */
export const toUnixSeconds = (ms: number): number => Math.floor(ms / 1000);
