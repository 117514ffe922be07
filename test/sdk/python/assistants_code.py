"""The flows of the three Assistants examples of OpenAI's Python SDK (examples/assistant.py,
assistant_stream.py, assistant_stream_helpers.py), all with code_interpreter, against the gateway
and its sandbox (test/sdk/python.test.ts runs it): a math tutor run with create_and_poll, a streamed
run through an AssistantEventHandler that prints the code and its output, and the streaming
helpers (text_deltas, until_done, get_final_messages). Prints what the handlers printed, then one
JSON object of what it saw.

Configured by OPENAI_BASE_URL and OPENAI_API_KEY alone. The fake provider is told what to do by a
`#fake` line in the user's message (docs/fake-provider.md): call the gateway's `python` function
with the given code, then answer.
"""

import json

import openai
from openai import AssistantEventHandler
from openai.types.beta.threads import ImageFile, Text, TextDelta
from openai.types.beta.threads.runs import ToolCall, ToolCallDelta
from typing_extensions import override

QUESTION = "I need to solve the equation `3x + 11 = 14`. Can you help me?"


def fake(code: str, reply: str) -> str:
    """The user's question, with the fake provider's scenario: run `code`, then answer `reply`."""
    scenario = [{"tool_calls": [{"name": "python", "arguments": {"code": code}}]}, {"reply": reply}]
    return f"{QUESTION}\n#fake {json.dumps(scenario)}"


client = openai.OpenAI()
assistant = client.beta.assistants.create(
    name="Math Tutor",
    instructions="You are a personal math tutor. Write and run code to answer math questions.",
    tools=[{"type": "code_interpreter"}],
    model="gpt-4-1106-preview",
)
seen: dict = {}

# examples/assistant.py: a run created and polled, then the thread's messages.
thread = client.beta.threads.create()
client.beta.threads.messages.create(
    thread_id=thread.id,
    role="user",
    content=fake("x = (14 - 11) / 3\nprint(f'x = {x}')", "The solution is x = 1, Jane Doe."),
)
run = client.beta.threads.runs.create_and_poll(
    thread_id=thread.id,
    assistant_id=assistant.id,
    instructions="Please address the user as Jane Doe. The user has a premium account.",
    poll_interval_ms=50,
)
print("Run completed with status: " + run.status)
messages = client.beta.threads.messages.list(thread_id=thread.id)
for message in messages:
    assert message.content[0].type == "text"
    print({"role": message.role, "message": message.content[0].text.value})
steps = client.beta.threads.runs.steps.list(thread_id=thread.id, run_id=run.id, order="asc")
calls = [call for step in steps if step.step_details.type == "tool_calls" for call in step.step_details.tool_calls]
seen["tutor"] = {
    "status": run.status,
    "messages": [[message.role, message.content[0].text.value] for message in messages],
    "code": [
        [call.type, call.code_interpreter.input, [out.logs for out in call.code_interpreter.outputs if out.type == "logs"]]
        for call in calls
        if call.type == "code_interpreter"
    ],
}


# examples/assistant_stream.py: an event handler that prints the code and its output as they come.
class EventHandler(AssistantEventHandler):
    def __init__(self) -> None:
        super().__init__()
        self.printed: list[str] = []
        self.images: list[str] = []
        self.figures: list[str] = []

    def say(self, text: str) -> None:
        self.printed.append(text)
        print(text, end="", flush=True)

    @override
    def on_text_created(self, text: Text) -> None:
        self.say("\nassistant > ")

    @override
    def on_text_delta(self, delta: TextDelta, snapshot: Text) -> None:
        self.say(delta.value or "")

    @override
    def on_tool_call_created(self, tool_call: ToolCall) -> None:
        self.say(f"\nassistant > {tool_call.type}\n")

    @override
    def on_tool_call_delta(self, delta: ToolCallDelta, snapshot: ToolCall) -> None:
        if delta.type == "code_interpreter" and delta.code_interpreter:
            if delta.code_interpreter.input:
                self.say(delta.code_interpreter.input)
            if delta.code_interpreter.outputs:
                self.say("\n\noutput >")
                for output in delta.code_interpreter.outputs:
                    if output.type == "logs":
                        self.say(f"\n{output.logs}")
                    elif output.type == "image" and output.image and output.image.file_id:
                        self.images.append(output.image.file_id)

    @override
    def on_image_file_done(self, image_file: ImageFile) -> None:
        self.figures.append(image_file.file_id)


chart = "import matplotlib.pyplot as plt\nxs = [0, 1, 2]\nplt.plot(xs, [3 * x + 11 for x in xs])\nprint('plotted', len(xs))"
thread = client.beta.threads.create(messages=[{"role": "user", "content": fake(chart, "Here is the line 3x + 11.")}])
handler = EventHandler()
with client.beta.threads.runs.stream(
    thread_id=thread.id,
    assistant_id=assistant.id,
    instructions="Please address the user as Jane Doe. The user has a premium account.",
    event_handler=handler,
) as stream:
    stream.until_done()
print()
final = handler.get_final_messages()
seen["stream"] = {
    "status": handler.get_final_run().status,
    "printed": "".join(handler.printed),
    "images": handler.images,
    "figures": handler.figures,
    "content": [part.type for part in final[0].content],
    "image_file": final[0].content[0].image_file.file_id if final[0].content[0].type == "image_file" else None,
    "figure_bytes": client.files.content(handler.images[0]).read()[:8].hex() if handler.images else None,
}

# examples/assistant_stream_helpers.py: the text as it comes, then the final messages.
thread = client.beta.threads.create(messages=[{"role": "user", "content": fake("print(14 - 11)", "So 3x = 3 and x = 1.")}])
deltas: list[str] = []
with client.beta.threads.runs.stream(thread_id=thread.id, assistant_id=assistant.id) as stream:
    for text in stream.text_deltas:
        deltas.append(text)
        print(text, end="", flush=True)
    print()
    stream.until_done()
    final = stream.get_final_messages()
    seen["helpers"] = {
        "text": "".join(deltas),
        "final": [[message.role, [part.text.value for part in message.content if part.type == "text"]] for message in final],
        "status": stream.get_final_run().status,
        "steps": [step.step_details.type for step in stream.get_final_run_steps()],
    }

client.beta.assistants.delete(assistant.id)
print(json.dumps(seen))
