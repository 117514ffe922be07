"""The Responses API through OpenAI's Python SDK, configured by OPENAI_BASE_URL and OPENAI_API_KEY
alone (test/sdk/python.test.ts runs it): a response whole, one streamed through the SDK's stream
helper, one parsed into a pydantic model, a function call round trip through previous_response_id,
a response's input items and input tokens, a response kept nowhere (store=False), two turns of a
conversation, a background response polled and its stream told again from a sequence number, and a
provider's reasoning streamed. Prints one JSON object of what it saw.
"""

import json
import time

from openai import NotFoundError, OpenAI
from pydantic import BaseModel

client = OpenAI(max_retries=0)


def fake(text, scenario):
    """Text whose last line tells the test's fake provider what to answer (docs/fake-provider.md)."""
    return f"{text}\n#fake {json.dumps(scenario)}"


created = client.responses.create(model="gpt-4o-mini", input=fake("Say hello", {"reply": "Hello there, friend."}))

deltas = []
with client.responses.stream(
    model="gpt-4o-mini",
    input=fake("Count to four", {"reply": "one two three four"}),
) as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    streamed = stream.get_final_response()


class Weather(BaseModel):
    city: str
    temperature: int


parsed = client.responses.parse(
    model="gpt-4o-mini",
    input=fake("Weather in Oslo as JSON", {"reply": json.dumps({"city": "Oslo", "temperature": 21})}),
    text_format=Weather,
)

tools = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": False,
    }
]
asked = client.responses.create(
    model="gpt-4o-mini",
    input=fake("Weather in Paris?", {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}),
    tools=tools,
)
call = next(item for item in asked.output if item.type == "function_call")
answered = client.responses.create(
    model="gpt-4o-mini",
    previous_response_id=asked.id,
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp":18}'}],
    tools=tools,
)
input_items = client.responses.input_items.list(answered.id)
counted = client.responses.input_tokens.count(model="gpt-4o-mini", input="one two three")

unkept = client.responses.create(model="gpt-4o-mini", input="Forget this.", store=False)
try:
    client.responses.retrieve(unkept.id)
    unkept_status = 200
except NotFoundError as error:
    unkept_status = error.status_code

conversation = client.conversations.create(metadata={"topic": "names"})
client.responses.create(
    model="gpt-4o-mini", conversation=conversation.id, input=fake("My name is Ada.", {"reply": "Hello Ada."})
)
second = client.responses.create(
    model="gpt-4o-mini", conversation=conversation.id, input=fake("Who am I?", {"reply": "You are Ada."})
)
conversation_items = client.conversations.items.list(conversation.id, order="asc")

background = client.responses.create(
    model="gpt-4o-mini", input=fake("Count to three", {"reply": "one two three"}), background=True
)
polled = background
while polled.status in ("queued", "in_progress"):
    # Waiting for a condition (the response's end), polled as OpenAI's background guide does.
    time.sleep(0.05)
    polled = client.responses.retrieve(background.id)
resumed = [
    (event.sequence_number, event.type)
    for event in client.responses.retrieve(background.id, stream=True, starting_after=2)
]

reasoned = []
with client.responses.stream(
    model="gpt-4o-mini",
    input=fake("Think, then answer", {"reasoning": "Let me think.", "reply": "Yes."}),
) as stream:
    for event in stream:
        if event.type == "response.reasoning_text.delta":
            reasoned.append(event.delta)
    thought = stream.get_final_response()

print(
    json.dumps(
        {
            "created": {
                "id": created.id,
                "status": created.status,
                "output_text": created.output_text,
                "output_tokens": created.usage.output_tokens,
            },
            "streamed": {
                "deltas": len(deltas),
                "text": "".join(deltas),
                "status": streamed.status,
                "output_text": streamed.output_text,
                "output_tokens": streamed.usage.output_tokens,
            },
            "parsed": {
                "type": type(parsed.output_parsed).__name__,
                "value": parsed.output_parsed.model_dump() if parsed.output_parsed else None,
            },
            "function_call": {
                "status": asked.status,
                "name": call.name,
                "arguments": call.arguments,
                "call_id": call.call_id,
                "previous_response_id": answered.previous_response_id,
                "answer": answered.output_text,
            },
            "input_items": [item.type for item in input_items.data],
            "input_tokens": {"object": counted.object, "count": counted.input_tokens},
            "unkept": {"status": unkept.status, "retrieved": unkept_status},
            "conversation": {
                "id": conversation.id,
                "answer": second.output_text,
                "conversation": second.conversation.id if second.conversation else None,
                "items": [[item.type, getattr(item, "role", None)] for item in conversation_items.data],
            },
            "background": {
                "created": background.status,
                "background": background.background,
                "polled": polled.status,
                "text": polled.output_text,
                "resumed": resumed,
            },
            "reasoning": {
                "deltas": reasoned,
                "items": [item.type for item in thought.output],
                "text": thought.output[0].content[0].text if thought.output[0].type == "reasoning" else None,
                "answer": thought.output_text,
            },
        }
    )
)
