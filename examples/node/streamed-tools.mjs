// @ts-check
// The official OpenAI SDK against the gateway, configured by OPENAI_BASE_URL and OPENAI_API_KEY
// alone: a run polled to its end, then a streamed run that calls a function, answered with
// submitToolOutputsStream until the run completes. docs/api.md runs it (npm run check:docs).
import OpenAI from 'openai';

const client = new OpenAI();

/**
 * The functions the assistant may call, by name.
 *
 * @type {Record<string, (args: { a: number, b: number }) => number>}
 */
const functions = {
  add: ({ a, b }) => a + b,
};

const assistant = await client.beta.assistants.create({
  model: 'gpt-4o',
  instructions: 'You are a personal math tutor. Use the add function for sums.',
  tools: [
    {
      type: 'function',
      function: {
        name: 'add',
        description: 'Adds two numbers.',
        parameters: {
          type: 'object',
          properties: { a: { type: 'number' }, b: { type: 'number' } },
          required: ['a', 'b'],
        },
      },
    },
  ],
});

// Polled to the end.
const polled = await client.beta.threads.createAndRunPoll({
  assistant_id: assistant.id,
  thread: { messages: [{ role: 'user', content: 'What is 2 + 2?' }] },
});
console.log(`polled: ${polled.status}`);

// Streamed, with a function-call round trip ("required": the model must call a function first).
process.stdout.write('streamed: ');
const stream = client.beta.threads.createAndRunStream({
  assistant_id: assistant.id,
  tool_choice: 'required',
  thread: { messages: [{ role: 'user', content: 'Add 2 and 2.' }] },
});
stream.on('textDelta', (delta) => process.stdout.write(delta.value ?? ''));
let run = await stream.finalRun();
while (run.status === 'requires_action') {
  const calls = run.required_action?.submit_tool_outputs.tool_calls;
  if (!calls) throw new Error(`run ${run.id} requires action but names no tool calls`);
  const tool_outputs = calls.map((call) => {
    const call_function = functions[call.function.name];
    if (!call_function) throw new Error(`the assistant called an unknown function: ${call.function.name}`);
    const result = call_function(JSON.parse(call.function.arguments));
    process.stdout.write(`${call.function.name}(${call.function.arguments}) = ${result} `);
    return { tool_call_id: call.id, output: String(result) };
  });
  const next = client.beta.threads.runs.submitToolOutputsStream(run.id, { thread_id: run.thread_id, tool_outputs });
  next.on('textDelta', (delta) => process.stdout.write(delta.value ?? ''));
  run = await next.finalRun();
}
console.log(` ${run.status}`);
if (polled.status !== 'completed' || run.status !== 'completed') process.exit(1);
