"""`ModelTuner`: the trainable model an AgentScope agent talks to.

It is an AgentScope `ChatModelBase`: the agent calls it with formatted messages (and tools); it renders
them with the model's own chat template, generates through the engine, parses thinking / text / tool
calls into a `ChatResponse`, and records every call (exact prompt ids, response ids, log-probs) on the
episode's recorder. When a call continues an earlier one (its rendered prompt starts with that call's
prompt and reply), the earlier ids are reused verbatim and only the new text is tokenized, so the ids a
sample trains on are exactly those the engine produced. Per call only what is new is rendered
(astuner.model.chat.incremental_render) and text the run has tokenized before is looked up
(astuner.model.chat.prompt_tokens): the same text and ids as rendering and tokenizing it whole.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
import weakref
from dataclasses import dataclass, replace
from typing import Any, Optional

from agentscope.message import TextBlock, ThinkingBlock, ToolUseBlock
from agentscope.model import ChatModelBase, ChatResponse

from astuner.config.seed_api import SEED_GONE
from astuner.model.engines.base import Engine, GenerateResult, SamplingParams, derived_seed
from astuner.model.chat.continuation import continued_call
from astuner.model.chat.incremental_render import render_prompt
from astuner.model.chat.messages import normalize_messages, normalize_tools
from astuner.model.chat.prompt_tokens import prompt_tokenizer
from astuner.model.policies import PolicyMap
from astuner.schema.calls import CallRecord, EpisodeClosed, EpisodeRecorder
from astuner.model.chat.tool_parser import ParsedReply, parse_reply

CONTEXT_EXHAUSTED_REPLY = "[The conversation has reached the model's context limit; the episode ends here.]"


_STOP_IDS: "weakref.WeakKeyDictionary[Any, frozenset[int]]" = weakref.WeakKeyDictionary()


def ended_at_stop(result: GenerateResult, tokenizer: Any) -> GenerateResult:
    """A reply whose last token ends the turn stopped, whatever the engine says: vLLM reports "length" for an
    end-of-turn token sampled as the last one `max_tokens` allows. Only a reply cut by the limit is "length"."""
    if result.finish_reason != "length" or not result.token_ids:
        return result
    stops = _STOP_IDS.get(tokenizer)
    if stops is None:
        from astuner.model.engines.hf import stop_token_ids_of

        try:
            stops = frozenset(stop_token_ids_of(tokenizer))
        except (ValueError, AttributeError):  # a tokenizer without an end-of-sequence token
            stops = frozenset()
        try:
            _STOP_IDS[tokenizer] = stops
        except TypeError:  # not weakly referable
            pass
    if result.token_ids[-1] in stops:
        return GenerateResult(result.token_ids, result.logprobs, "stop")
    return result


def calling_agent(depth: int = 24) -> Optional[str]:
    """The name of the AgentScope agent whose method is calling the model (its `self` on the call stack), so that
    every recorded call says which agent made it when agents share one ModelTuner; None when none is found."""
    from agentscope.agent import AgentBase

    frame = sys._getframe(2)
    while frame is not None and depth > 0:
        owner = frame.f_locals.get("self")
        if isinstance(owner, AgentBase):
            name = getattr(owner, "name", None)
            return str(name) if name else None
        frame, depth = frame.f_back, depth - 1
    return None


@dataclass
class PreparedCall:
    """A model call rendered and tokenized, before the engine (`ModelTuner.prepare`)."""

    target: str
    policy: str  # the policy that generates it (astuner.model.policies)
    msgs: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]
    prompt_text: str
    prompt_ids: list[int]
    sampling: SamplingParams
    refused: Optional[str] = None  # why the call cannot run (its prompt leaves no room for the reply)
    engine_started: bool = False  # the engine's coroutine has begun on the loop the engine serves on


@dataclass
class CompletedCall:
    """A generated call: its record (not yet on the episode), the parsed reply, an id per parsed tool call."""

    record: CallRecord
    parsed: ParsedReply
    call_ids: list[str]


class ModelTuner(ChatModelBase):
    """Pass it as `model=` to an AgentScope agent inside your `Workflow.execute`."""

    def __init__(self, engine: Engine, tokenizer: Any, sampling: SamplingParams, max_model_len: int,
                 recorder: Optional[EpisodeRecorder] = None, target: str = "default",
                 trainable_targets: Optional[list[str]] = None, chat_template_kwargs: Optional[dict] = None,
                 loop: Optional[asyncio.AbstractEventLoop] = None, model_name: str = "astuner-policy",
                 reply_format: tuple[str, str] = ("hermes", "auto"), gateway_settings: Any = None,
                 policies: Optional[PolicyMap] = None, engines: Optional[dict[str, Engine]] = None):
        super().__init__(model_name=model_name, stream=False)
        self.gateway_settings = gateway_settings  # astuner.rollout.openai_gateway (None: its defaults)
        self.reply_format = reply_format  # (tool-call format, reasoning): astuner.model.chat.tool_parser
        self.engine, self.tokenizer, self.sampling = engine, tokenizer, sampling
        self.max_model_len = max_model_len
        self.recorder = recorder if recorder is not None else EpisodeRecorder()
        self.target = target
        # which policy serves which agent, and each policy's engine (one policy: `engine`, today's map)
        self.policies = policies if policies is not None else PolicyMap(targets=trainable_targets)
        self._trainable_targets = trainable_targets
        self.engines = dict(engines or {})
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.loop = loop  # the loop the engine serves on; calls from other threads are forwarded to it
        self._config: Any = None  # the run's composed config (the seed system's model_tuner.config), when known
        self.registered: dict[str, ChatModelBase] = {}  # this episode's register_model results, by agent

    # -- the seed system's ModelTuner API ------------------------------------------------------------------------
    @property
    def config(self) -> Any:
        """The run's whole config, composed (every section of the YAML, the user's own ones too), read-only, with
        attribute access: `model_tuner.config.astuner.rollout.multi_turn.max_steps`."""
        if callable(self._config):  # made when first read (most workflows never read it)
            self._config = self._config()
        if self._config is None:
            raise AttributeError("model_tuner.config: this model was not made by a run (no config to give)")
        return self._config

    @config.setter
    def config(self, value: Any) -> None:
        """The config, or a function of no arguments that makes it."""
        self._config = value

    def get_model(self, target_name: str) -> ChatModelBase:
        """The model `register_model(target_name, ...)` gave in this episode."""
        if target_name not in self.registered:
            raise ValueError(f"agent {target_name!r} is not registered in this episode; call "
                             f"model_tuner.register_model({target_name!r}, default_model=...) first")
        return self.registered[target_name]

    def is_trainable(self, target_name: str) -> bool:
        """Whether `target_name`'s calls are generated by a trained policy and recorded (`trains`)."""
        return self.trains(target_name)

    def get_llm_proxy(self) -> Any:
        raise AttributeError(SEED_GONE["get_llm_proxy"])

    def get_context_tracker(self) -> Any:
        raise AttributeError(SEED_GONE["get_context_tracker"])

    # -- multi-agent ---------------------------------------------------------------------------------
    @property
    def trainable_targets(self) -> Optional[list[str]]:
        return self._trainable_targets

    @trainable_targets.setter
    def trainable_targets(self, targets: Optional[list[str]]) -> None:
        """With one policy, the agents it serves (None: all); set on a tuner, its map follows."""
        self._trainable_targets = targets
        if not self.policies.several:
            self.policies = PolicyMap(self.policies.entries, self.policies.trainable, targets)

    def trains(self, agent: str) -> bool:
        """Whether `agent` is served by one of the run's policies (its calls are generated by that policy and
        recorded; trained on unless the policy is frozen): with one policy, trainable_targets (None = all)."""
        return self.policies.policy_of(agent) is not None

    def policy_of(self, agent: str) -> str:
        """The policy that serves `agent`'s calls; an agent outside the map is refused when the run has several
        policies, and served (not trained on) by the one policy otherwise."""
        policy = self.policies.policy_of(agent)
        if policy is not None:
            return policy
        if self.policies.several:
            raise ValueError(f"agent {agent!r} matches no astuner.rollout.agent_policy entry; map it to a policy, or "
                             f"give it a model of its own (register_model's default_model)")
        return next(iter(self.policies.trainable))

    def register_model(self, target_name: str, default_model: Optional[ChatModelBase] = None) -> ChatModelBase:
        """The model agent `target_name` should use: a ModelTuner recording into this episode when the
        target is trainable (`trainable_targets` None = all), else `default_model`."""
        self.recorder.agents.add(target_name)
        if not self.trains(target_name):
            if default_model is None:
                where = ("matches no astuner.rollout.agent_policy entry" if self.policies.several else
                         f"is not in trainable_targets {self.trainable_targets}")
                raise ValueError(f"agent {target_name!r} {where}; pass default_model= for it")
            self.registered[target_name] = default_model
            return default_model
        model = ModelTuner(self.engine, self.tokenizer, self.sampling, self.max_model_len, self.recorder,
                           target_name, self.trainable_targets, self.chat_template_kwargs, self.loop, self.model_name,
                           self.reply_format, self.gateway_settings, self.policies, self.engines)
        model._config, model.registered = self._config, self.registered
        self.registered[target_name] = model
        return model

    def as_agentscope_model(self, agent_name: str = "default_agent_name", target_tag: str = "default_target_tag",
                            debug_model: Optional[ChatModelBase] = None) -> ChatModelBase:
        """AgentJet's name for `register_model`: the model of the agent whose target is `target_tag` (trained when
        the workflow's trainable_targets has it, or is None), else `debug_model`. `agent_name` is AgentJet's label
        for the agent; astuner records the calls under `target_tag`."""
        return self.register_model(target_tag, default_model=debug_model)

    # -- the OpenAI-compatible route -----------------------------------------------------------------------------
    def as_openai_base_url(self, agent: Optional[str] = None) -> tuple[str, str]:
        """`(base_url, api_key)` of this episode on the run's OpenAI-compatible gateway (astuner.gateway), for an
        agent that keeps its own client (an AgentScope OpenAIChatModel, the openai SDK, LangChain, plain HTTP):
        its calls are generated by the trained model and recorded as this episode's, under `agent` (default: the
        name register_model gave, else "default"). The key expires when the episode ends."""
        from astuner.gateway import gateway_for

        agent = agent or self.target
        if (agent != "default" or self.policies.several) and not self.trains(agent):
            where = ("matches no astuner.rollout.agent_policy entry (name the agent: as_openai_base_url(agent=...))"
                     if self.policies.several else f"is not in trainable_targets {self.trainable_targets}")
            raise ValueError(f"agent {agent!r} {where}; give it a model of its own")
        gateway = gateway_for(self.gateway_settings)
        return gateway.base_url, gateway.keys.issue(self, agent)

    def as_openai_client(self, agent: Optional[str] = None, **client_args: Any) -> Any:
        """A ready `openai.AsyncOpenAI` for this episode's gateway key (see as_openai_base_url)."""
        import openai

        base_url, api_key = self.as_openai_base_url(agent)
        return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, **client_args)

    # -- the call ------------------------------------------------------------------------------------
    async def __call__(self, messages: list[dict], tools: Optional[list[dict]] = None,
                       tool_choice: Optional[str] = None, **kwargs: Any) -> ChatResponse:
        # the agent: the name register_model gave, else the AgentScope agent that is calling
        target = self.target if self.target != "default" else (calling_agent() or "default")
        call = self.prepare(messages, tools, tool_choice, target=target)
        if call.refused:
            return ChatResponse(content=[TextBlock(type="text", text=CONTEXT_EXHAUSTED_REPLY)],
                                metadata={"truncated": True})
        done = await self.complete(call)
        self.recorder.add(done.record)
        content: list[Any] = []
        if done.parsed.thinking:
            content.append(ThinkingBlock(type="thinking", thinking=done.parsed.thinking))
        if done.parsed.text.strip() or not done.parsed.tool_calls:  # (not the whitespace between tool calls)
            content.append(TextBlock(type="text", text=done.parsed.text))
        for call_id, tool_call in zip(done.call_ids, done.parsed.tool_calls):
            content.append(ToolUseBlock(type="tool_use", id=call_id, name=tool_call.name, input=tool_call.arguments,
                                        raw_input=tool_call.raw))
        return ChatResponse(content=content, metadata={"finish_reason": done.record.finish_reason})

    def prepare(self, messages: Any, tools: Any = None, tool_choice: Optional[str] = None, *,
                target: Optional[str] = None, sampling: Optional[SamplingParams] = None) -> PreparedCall:
        """A call up to the engine: messages and tools checked and rendered, the prompt's ids. A prompt that
        leaves no room for the reply within max_model_len is refused (`refused` says why; the episode is marked
        truncated). Shared by the AgentScope route (`__call__`) and the OpenAI gateway (astuner.gateway)."""
        target, msgs, tool_list = self.checked(messages, tools, tool_choice, target)
        sampling = sampling or self.sampling
        if sampling.seed is not None:  # the episode's seed: each call its own, by its place in the episode
            sampling = replace(sampling, seed=derived_seed(sampling.seed, self.recorder.next_call_index()))
        prompt_text = render_prompt(self.tokenizer, self.render, msgs, tool_list, self.chat_template_kwargs,
                                    self.recorder.calls, target)  # only what is new since the last call
        prompt_ids = self._prompt_ids(prompt_text)
        call = PreparedCall(target, self.policy_of(target), msgs, tool_list, prompt_text, prompt_ids, sampling)
        if len(prompt_ids) + sampling.max_tokens > self.max_model_len:
            call.refused = (f"prompt of {len(prompt_ids)} tokens + {sampling.max_tokens} reply tokens > "
                            f"max_model_len {self.max_model_len}")
            self.recorder.refuse(target, call.refused)
        return call

    def checked(self, messages: Any, tools: Any, tool_choice: Optional[str], target: Optional[str]
                ) -> tuple[str, list[dict[str, Any]], Optional[list[dict[str, Any]]]]:
        """(the calling agent, the messages and the tools the call offers), checked: the episode still open, the
        messages and tools well-formed, tool_choice one of the tools (`none`: no tools)."""
        if self.recorder.closed:
            raise EpisodeClosed("the episode is over (it ended or timed out); this model call is refused")
        target = target or self.target
        self.recorder.agents.add(target)
        msgs = normalize_messages(messages)
        tool_list = normalize_tools(tools)
        if tool_choice is not None:
            self._validate_tool_choice(tool_choice, tool_list or [])
            if tool_choice == "none":
                tool_list = None
        return target, msgs, tool_list

    async def complete(self, call: PreparedCall) -> CompletedCall:
        """Generate a prepared call through the engine and parse the reply; the call's record is returned, not
        yet added to the episode (the caller adds it once the agent has the reply)."""
        result = ended_at_stop(await self._generate(call), self.tokenizer)
        reply_ids = result.token_ids[:-1] if result.finish_reason == "stop" and result.token_ids else result.token_ids
        reply_text = self.tokenizer.decode(reply_ids, skip_special_tokens=False)
        decoded = reply_text if len(reply_ids) == len(result.token_ids) else \
            self.tokenizer.decode(result.token_ids, skip_special_tokens=False)
        tool_names = {t["function"]["name"] for t in call.tools} if call.tools else set()
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in call.tools or []}
        parsed = parse_reply(reply_text, tool_names, *self.reply_format, schemas=schemas)
        record = CallRecord(
            target=call.target, policy=call.policy, messages=call.msgs, tools=call.tools, prompt_text=call.prompt_text,
            prompt_ids=call.prompt_ids, response_ids=list(result.token_ids), logprobs=list(result.logprobs),
            finish_reason=result.finish_reason, response_text=reply_text, tool_call_errors=parsed.errors,
            decoded_response=decoded,
            sampling={"temperature": call.sampling.temperature, "top_p": call.sampling.top_p})
        return CompletedCall(record, parsed, [f"call_{uuid.uuid4().hex[:16]}" for _ in parsed.tool_calls])

    def render(self, msgs: list[dict[str, Any]], tools: Optional[list[dict[str, Any]]], prompt: bool = True) -> str:
        """`msgs` rendered whole by the model's chat template (`prompt`: with the generation prompt)."""
        return self.tokenizer.apply_chat_template(msgs, tools=tools, add_generation_prompt=prompt, tokenize=False,
                                                  **self.chat_template_kwargs)

    def _prompt_ids(self, prompt_text: str) -> list[int]:
        """The exact ids of the earlier call this prompt continues (its prompt and reply, even where the chat
        template re-rendered the reply: astuner.model.chat.continuation); only the rest is tokenized."""
        tokens = prompt_tokenizer(self.tokenizer)  # chunks the run has tokenized before are looked up
        found = continued_call(prompt_text, self.recorder.calls)
        if found is None:
            return tokens.encode(prompt_text)
        call, used = found
        return call.prompt_ids + call.response_ids + tokens.encode(prompt_text[used:])

    async def _generate(self, call: PreparedCall) -> GenerateResult:
        async def generate() -> GenerateResult:
            call.engine_started = True
            return await self.engines.get(call.policy, self.engine).generate(call.prompt_ids, call.sampling)

        running = asyncio.get_running_loop()
        if self.loop is not None and self.loop is not running:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(generate(), self.loop))
        return await generate()
