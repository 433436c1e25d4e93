"""fs-serve driven by the client libraries people point at a local server, each as its users call it, against the
shipped demo model: the OpenAI Agents SDK (Responses and Chat Completions models), langchain-openai (tools and
structured output), instructor (JSON_SCHEMA and TOOLS modes) and lm-evaluation-harness (loglikelihood through
``echo`` and a remote tokenizer; generation). Each call must succeed and its parsed result validate.

The libraries are the ``clients`` dependency group; ``nox -s tests`` installs it for fs-serve and sets
FS_REQUIRE_CLIENTS=1, so there a missing library fails instead of skipping."""

import importlib
import os
from typing import Literal

import pytest
from pydantic import BaseModel


def lib(name: str):
    if os.environ.get("FS_REQUIRE_CLIENTS") == "1":
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=f"{name} is in the clients group: uv sync --group clients")


class Verdict(BaseModel):
    verdict: Literal["yes", "no"]  # an enum: a random-ish model's answer ends, and it either validates or it does not


@pytest.fixture(scope="module")
def base(demo_server):
    return f"{demo_server.url}/v1"


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_the_agents_sdk_runs_a_tool_calling_agent(base, api):
    agents = lib("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # the SDK would export traces to OpenAI
    called: list[str] = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:
        """The weather in a city."""
        called.append(city)
        return f"sunny in {city}"

    model_class = {"responses": agents.OpenAIResponsesModel, "chat_completions": agents.OpenAIChatCompletionsModel}
    agent = agents.Agent(
        name="weather",
        instructions="Answer with the tool.",
        tools=[get_weather],
        model=model_class[api](model="fs-demo", openai_client=AsyncOpenAI(base_url=base, api_key="unused")),
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=64, temperature=0),
        tool_use_behavior="stop_on_first_tool",
    )
    result = agents.Runner.run_sync(agent, "What is the weather in Paris?")
    assert len(called) == 1 and result.final_output == f"sunny in {called[0]}"


def test_langchain_binds_tools_and_parses_structured_output(base):
    lc = lib("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def lookup(city: Literal["Paris", "Rome"]) -> str:
        """Look a city up."""
        return city

    llm = lc.ChatOpenAI(base_url=base, api_key="unused", model="fs-demo", temperature=0, max_tokens=64)
    msg = llm.bind_tools([lookup], tool_choice="lookup").invoke("Look up Paris")
    (call,) = msg.tool_calls
    assert call["name"] == "lookup" and call["args"]["city"] in ("Paris", "Rome")
    assert isinstance(llm.with_structured_output(Verdict, method="json_schema").invoke("Is water wet?"), Verdict)
    assert isinstance(llm.invoke("Say hi").content, str)


@pytest.mark.parametrize("mode", ["JSON_SCHEMA", "TOOLS"])
def test_instructor_gets_a_validated_model(base, mode):
    instructor = lib("instructor")
    from openai import OpenAI

    client = instructor.from_openai(OpenAI(base_url=base, api_key="unused"), mode=getattr(instructor.Mode, mode))
    got = client.chat.completions.create(model="fs-demo", response_model=Verdict, max_tokens=64, max_retries=0,
                                         messages=[{"role": "user", "content": "Is water wet?"}])  # fmt: skip
    assert isinstance(got, Verdict)


def test_lm_eval_loglikelihood_equals_fs_own_scores(base, demo_server):
    """lm-eval's local-completions model finds fs-serve's remote tokenizer, sends ``echo: true, logprobs: 1,
    max_tokens: 1`` and sums the continuation's ``token_logprobs``: exactly fs_generate.scoring's numbers for the
    same tokens (lm-eval sends the context's own encoding, then the joint encoding of context + continuation past
    the context's length)."""
    lib("lm_eval")
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from fs_generate import load
    from fs_generate.scoring import score

    model, tok = load(None)
    lm = LocalCompletionsAPI(base_url=f"{base}/completions", model="fs-demo", num_concurrent=1, max_retries=1)
    assert lm.tokenizer_backend == "remote"  # found /tokenizer_info and /tokenize
    pairs = [("The capital of France is", " Paris"), ("def fibonacci(n):", "\n    return n")]
    got = lm.loglikelihood([Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)])
    for (ctx, cont), (ll, _greedy) in zip(pairs, got, strict=True):
        head = tok.encode(ctx)
        sent = head + tok.encode(ctx + cont)[len(head) :]
        assert ll == sum(score(model, [sent])[0].logprobs[len(head) :])
    until = {"until": ["\n\n"], "max_gen_toks": 8}
    (text,) = lm.generate_until([Instance("generate_until", {}, ("The with statement", until), 0)])
    assert isinstance(text, str) and "\n\n" not in text
