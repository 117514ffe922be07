import type { Deps } from '../../deps';
import { ApiError } from '../../errors';
import { getFile } from '../files/queries';
import type { ThreadMessageInput } from './schemas';

/**
 * A message's attachments for code_interpreter are put in the thread's sandbox session when a run
 * uses the tool (resources/runs/execution/code-interpreter-round.ts): accepted only where there is
 * a sandbox, else refused naming the first, as a run with the tool is (runs/execution/settings.ts);
 * each must be a file of the workspace (404 naming it).
 */
export async function checkCodeAttachments(
  deps: Pick<Deps, 'db' | 'sandbox' | 'now'>,
  workspaceId: string,
  messages: readonly ThreadMessageInput[],
  param: (index: number) => string,
): Promise<void> {
  for (const [index, message] of messages.entries()) {
    for (const [at, attachment] of (message.attachments ?? []).entries()) {
      const tool = attachment.tools?.findIndex((one) => one.type === 'code_interpreter') ?? -1;
      if (tool === -1) continue;
      if (!(await deps.sandbox.availability()).available) {
        throw new ApiError(
          'unsupported_tool',
          'Attachments for code_interpreter need a code sandbox, which this gateway does not have: install bubblewrap ' +
            'and Python with numpy, pandas and matplotlib, or set GATEWAY_SANDBOX_URL (docs/sandbox.md). Attach files for file_search.',
          { param: `${param(index)}attachments[${at}].tools[${tool}]` },
        );
      }
      await getFile(deps.db, workspaceId, attachment.file_id, deps.now()).catch((error: unknown) => {
        if (!(error instanceof ApiError)) throw error;
        throw new ApiError(error.code, error.message, { param: `${param(index)}attachments[${at}].file_id` });
      });
    }
  }
}
