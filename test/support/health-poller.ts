import { mainThreadSchedule } from './processes';

/**
 * A process that times a gateway's `/health` about every millisecond until its parent asks for
 * what it measured (startHealthPoller, processes.ts): each answer's latency, and the gateway's own
 * part of it, that latency minus the time two main threads spent waiting for a CPU meanwhile, the
 * gateway's and this process's. Either waiting is the machine's doing, not the gateway's.
 *
 * A process of its own, whose event loop does nothing else: a poller in the test's process read
 * each answer only once that process's other work (the runs it creates and follows, their streams)
 * let it, and, on a loaded machine, once that process had a CPU again; both counted as the
 * gateway's stalls (test/reliability/support.ts, whileMeasured, says more).
 *
 * The first answer is not counted: this process's first fetch loads and compiles Node's HTTP
 * client and opens the connection, 30 ms and more of this process's own work (on a machine at
 * rest; over 50 on a loaded one), which the schedule's waits do not take out and which the gateway
 * had no part in.
 *
 * Arguments: the gateway's URL and its pid. Messages out: 'polling' once its first answer came;
 * then, when 'stop' comes in, { raw, own } (ms), and it exits.
 */

const [url, pidText] = process.argv.slice(2);
const pid = Number(pidText);
const raw: number[] = [];
const own: number[] = [];
let stopped = false;
process.on('message', () => (stopped = true));

await (await fetch(`${url}/health`)).arrayBuffer();
process.send?.('polling');

while (!stopped) {
  const gatewayBefore = mainThreadSchedule(pid).waitingMs;
  const pollerBefore = mainThreadSchedule(process.pid).waitingMs;
  const started = performance.now();
  const response = await fetch(`${url}/health`);
  await response.arrayBuffer();
  const ms = performance.now() - started;
  const waited =
    mainThreadSchedule(pid).waitingMs - gatewayBefore + (mainThreadSchedule(process.pid).waitingMs - pollerBefore);
  raw.push(ms);
  own.push(ms - waited);
  await new Promise((resolve) => setTimeout(resolve, 1));
}
process.send?.({ raw, own }, () => process.exit(0));
