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
from typing import Any, Optional

from agentscope.message import TextBlock, ThinkingBlock, ToolUseBlock
from agentscope.model import ChatModelBase, ChatResponse

from astuner.model.engines.base import Engine, GenerateResult, SamplingParams
from astuner.model.chat.continuation import continued_call
from astuner.model.chat.incremental_render import render_prompt
from astuner.model.chat.messages import normalize_messages, normalize_tools
from astuner.model.chat.prompt_tokens import prompt_tokenizer
from astuner.schema.calls import CallRecord, EpisodeRecorder
from astuner.model.chat.tool_parser import parse_reply

CONTEXT_EXHAUSTED_REPLY = "[The conversation has reached the model's context limit; the episode ends here.]"


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


class EpisodeClosed(RuntimeError):
    """A call from a workflow that is still running after its episode ended (a timed-out thread)."""


class ModelTuner(ChatModelBase):
    """Pass it as `model=` to an AgentScope agent inside your `Workflow.execute`."""

    def __init__(self, engine: Engine, tokenizer: Any, sampling: SamplingParams, max_model_len: int,
                 recorder: Optional[EpisodeRecorder] = None, target: str = "default",
                 trainable_targets: Optional[list[str]] = None, chat_template_kwargs: Optional[dict] = None,
                 loop: Optional[asyncio.AbstractEventLoop] = None, model_name: str = "astuner-policy",
                 reply_format: tuple[str, str] = ("hermes", "auto")):
        super().__init__(model_name=model_name, stream=False)
        self.reply_format = reply_format  # (tool-call format, reasoning): astuner.model.chat.tool_parser
        self.engine, self.tokenizer, self.sampling = engine, tokenizer, sampling
        self.max_model_len = max_model_len
        self.recorder = recorder if recorder is not None else EpisodeRecorder()
        self.target, self.trainable_targets = target, trainable_targets
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.loop = loop  # the loop the engine serves on; calls from other threads are forwarded to it

    # -- multi-agent ---------------------------------------------------------------------------------
    def register_model(self, target_name: str, default_model: Optional[ChatModelBase] = None) -> ChatModelBase:
        """The model agent `target_name` should use: a ModelTuner recording into this episode when the
        target is trainable (`trainable_targets` None = all), else `default_model`."""
        trainable = self.trainable_targets is None or target_name in self.trainable_targets
        if not trainable:
            if default_model is None:
                raise ValueError(f"agent {target_name!r} is not in trainable_targets {self.trainable_targets}; "
                                 f"pass default_model= for it")
            return default_model
        return ModelTuner(self.engine, self.tokenizer, self.sampling, self.max_model_len, self.recorder,
                          target_name, self.trainable_targets, self.chat_template_kwargs, self.loop, self.model_name,
                          self.reply_format)

    # -- the call ------------------------------------------------------------------------------------
    async def __call__(self, messages: list[dict], tools: Optional[list[dict]] = None,
                       tool_choice: Optional[str] = None, **kwargs: Any) -> ChatResponse:
        if self.recorder.closed:
            raise EpisodeClosed("the episode is over (it timed out); this model call is refused")
        # the agent: the name register_model gave, else the AgentScope agent that is calling
        target = self.target if self.target != "default" else (calling_agent() or "default")
        msgs = normalize_messages(messages)
        tool_list = normalize_tools(tools)
        if tool_choice is not None:
            self._validate_tool_choice(tool_choice, tool_list or [])
            if tool_choice == "none":
                tool_list = None
        prompt_text = render_prompt(self.tokenizer, self.render, msgs, tool_list, self.chat_template_kwargs,
                                    self.recorder.calls, target)  # only what is new since the last call
        prompt_ids = self._prompt_ids(prompt_text)
        if len(prompt_ids) + self.sampling.max_tokens > self.max_model_len:
            self.recorder.truncated = True
            self.recorder.notes.append(f"call refused: prompt of {len(prompt_ids)} tokens + "
                                       f"{self.sampling.max_tokens} reply tokens > max_model_len {self.max_model_len}")
            return ChatResponse(content=[TextBlock(type="text", text=CONTEXT_EXHAUSTED_REPLY)],
                                metadata={"truncated": True})
        result = await self._generate(prompt_ids)
        reply_ids = result.token_ids[:-1] if result.finish_reason == "stop" and result.token_ids else result.token_ids
        reply_text = self.tokenizer.decode(reply_ids, skip_special_tokens=False)
        decoded = reply_text if len(reply_ids) == len(result.token_ids) else \
            self.tokenizer.decode(result.token_ids, skip_special_tokens=False)
        tool_names = {t["function"]["name"] for t in tool_list} if tool_list else set()
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tool_list or []}
        parsed = parse_reply(reply_text, tool_names, *self.reply_format, schemas=schemas)
        self.recorder.add(CallRecord(
            target=target, messages=msgs, tools=tool_list, prompt_text=prompt_text, prompt_ids=prompt_ids,
            response_ids=list(result.token_ids), logprobs=list(result.logprobs), finish_reason=result.finish_reason,
            response_text=reply_text, tool_call_errors=parsed.errors, decoded_response=decoded))
        content: list[Any] = []
        if parsed.thinking:
            content.append(ThinkingBlock(type="thinking", thinking=parsed.thinking))
        if parsed.text or not parsed.tool_calls:
            content.append(TextBlock(type="text", text=parsed.text))
        for call in parsed.tool_calls:
            content.append(ToolUseBlock(type="tool_use", id=f"call_{uuid.uuid4().hex[:16]}", name=call.name,
                                        input=call.arguments, raw_input=call.raw))
        return ChatResponse(content=content, metadata={"finish_reason": result.finish_reason})

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

    async def _generate(self, prompt_ids: list[int]) -> GenerateResult:
        running = asyncio.get_running_loop()
        if self.loop is not None and self.loop is not running:
            future = asyncio.run_coroutine_threadsafe(self.engine.generate(prompt_ids, self.sampling), self.loop)
            return await asyncio.wrap_future(future)
        return await self.engine.generate(prompt_ids, self.sampling)
