/**
 * Reading responses in tests, runtime-neutral: the Node tests and the workerd tests (test/workers)
 * both use these.
 */

/** A response's JSON body, untyped: tests assert its shape. */
export const json = (response: Response): Promise<any> => response.json();

/** The error envelope of a response, asserting its shape on the way. */
export async function errorOf(response: Response) {
  const body = (await response.json()) as {
    error: { message: string; type: string; param: string | null; code: string };
  };
  if (!body.error || Object.keys(body.error).sort().join() !== 'code,message,param,type') {
    throw new Error(`Not an error envelope: ${JSON.stringify(body)}`);
  }
  return { status: response.status, ...body.error };
}
