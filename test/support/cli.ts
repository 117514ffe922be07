import { runCli } from '../../src/cli/run';

/** The CLI run in-process (a process costs ~1 s of module loading), its output captured. */
export async function runCliCaptured(args: string[], env: Record<string, string>) {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, env, {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
  });
  return { code, stdout, stderr };
}
