import { runCli } from './run';

/** The `gateway` command: see run.ts for the commands. */
runCli(process.argv.slice(2), process.env).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  },
);
