"""Synthetic coding-agent sessions: the library side of ``replay generate --profile agent``.

Owns :class:`AgentConfig` and :func:`generate_agentic`. A trace of schema 3 whose requests wait
for tools and for each other (``depends_on``, ``wait_us``; :mod:`replay.dag`), with real chat
bodies an OpenAI-compatible server accepts (``tools``, assistant ``tool_calls``, ``tool``
messages answering their ids). The model (figures and their sources in docs/agentic.md):

- Root sessions start as a Poisson process (``session_rate`` per second). A session is an agent
  loop of LLM calls ("steps"), geometric in number (mean ``steps_mean``). Every request holds the
  agent's tool definitions (``tools`` x ``tool_tokens`` of descriptions), its system prompt and
  the task, then the whole history so far: so the shared prefix is 10-20k tokens and contexts
  grow step by step to ``max_context_tokens`` (a session ends before a step that would not fit).
- A step's answer is some text and 1..8 parallel tool calls (``parallel_weights``); the tools run
  in parallel for lognormal times (median ``tool_time_p50_s``) and the next step is sent when the
  slowest ended (``wait_us`` = that time), carrying one ``tool`` message of lognormal size
  (median ``result_tokens_p50``) per call. The last step answers text only.
- With probability ``subagent_p`` a root step instead calls ``task`` 1..``subagents_max`` times:
  each call starts a subagent session (``parent_session_id``, agent ``explorer``, its own smaller
  system prompt and tools) whose first message is the call's arguments and which depends on the
  step that called it (siblings leave together). The parent's next step is a join: it depends on
  that step and on every subagent's last request, whose final answers are its tool results.
- Arrivals follow from a live engine's durations: a request ends ``request_overhead_s`` + its new
  (uncached) prompt tokens at ``prefill_tokens_per_s`` + its output at ``decode_s_per_token``
  after it arrived (``ttft_us``, ``e2e_us``), and its dependents arrive their wait after that.

``response`` holds each answer's text (its tool calls are in the next step's history:
:func:`answer_messages` gives the whole assistant message). Token counts are those of the texts
(tool descriptions, system prompt, task, answers, call arguments and tool results), made of
:mod:`replay.prompts` units, exactly as :mod:`replay.generate` counts a chat: the server's chat
template and the JSON around the texts add a few tokens per message that ``input_tokens`` does
not count. ``output_tokens`` (and ``max_tokens`` in the body) is the answer as an engine counts
what it generates: the answer text, the call arguments' text, and per call
``TOOL_CALL_OVERHEAD_TOKENS`` (:mod:`replay._engine`, 15: the markers and name a Hermes-style
model writes around a call's arguments; the embedded engine counts a call so). ``tool_calls`` is
each call's arguments (the tokens of its ``input`` string), so that a replay on the embedded
engine answers with calls of those sizes and the text filling the rest of ``max_tokens``
(:meth:`replay.plan.Plan.head_lines`): its completion tokens are the recorded output tokens and
its text, resent in later steps' histories, as long as the recorded text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import polars as pl

from replay._engine import TOOL_CALL_OVERHEAD_TOKENS
from replay.blocks import block_hashes
from replay.bodies import body_json
from replay.errors import ConfigError
from replay.generate import generated_meta
from replay.trace import BLOCK_SIZE, Trace, validate

__all__ = ["AgentConfig", "generate_agentic", "answer_messages", "ROOT_TOOLS", "SUBAGENT_TOOLS"]

_AGENT_DOMAIN = 0xA6E7
# the coding agent's tools (the last spawns a subagent) and the subagent's
ROOT_TOOLS = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "grep",
    "glob",
    "run_shell",
    "run_tests",
    "git_diff",
    "git_status",
    "web_search",
    "web_fetch",
    "todo_write",
    "notebook_edit",
    "ask_user",
    "task",
)
SUBAGENT_TOOLS = ("read_file", "list_dir", "grep", "glob", "run_shell", "web_search")
_MAX_STEPS = 400


@dataclass(frozen=True)
class AgentConfig:
    """What :func:`generate_agentic` makes; every random choice follows ``seed``."""

    sessions: int = 8  # root sessions
    seed: int = 0
    session_rate: float = 0.05  # root sessions started per second (Poisson)
    steps_mean: float = 31.0  # LLM calls per root session (geometric)
    system_tokens: int = 3000  # the coding agent's system prompt
    tool_tokens: int = 650  # description tokens of each tool (16 tools: ~10.4k)
    task_tokens_p50: int = 300  # the user's task
    content_tokens_p50: int = 120  # the text of a step's answer
    argument_tokens_p50: int = 60  # one tool call's arguments
    result_tokens_p50: int = 1200  # one tool result
    result_sigma: float = 1.2
    max_result_tokens: int = 20_000
    # P(1..8 parallel calls in a step)
    parallel_weights: tuple[float, ...] = (0.55, 0.2, 0.1, 0.06, 0.04, 0.02, 0.02, 0.01)
    tool_time_p50_s: float = 1.5
    tool_time_sigma: float = 1.0
    subagent_p: float = 0.06  # chance a root step spawns subagents
    subagents_max: int = 4
    subagent_steps_mean: float = 8.0
    subagent_system_tokens: int = 1500
    answer_tokens_p50: int = 400  # a session's final answer
    max_context_tokens: int = 180_000
    # the live engine whose durations place the arrivals
    request_overhead_s: float = 0.25
    prefill_tokens_per_s: float = 10_000.0
    decode_s_per_token: float = 0.02
    model: str = "default"
    tokenizer: str = "gpt2"
    block_size: int = BLOCK_SIZE
    sigma: float = 0.8  # log-space sigma of the text lengths but tool results

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("seed", "model", "tokenizer", "parallel_weights"):
                continue
            if f.name in ("subagent_p",):
                if not 0 <= value <= 1:
                    raise ConfigError(f"agent profile: {f.name} must be in [0, 1], got {value}")
            elif not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"agent profile: {f.name} must be > 0, got {value!r}")
        if not self.parallel_weights or min(self.parallel_weights) < 0 or sum(self.parallel_weights) <= 0:
            raise ConfigError("agent profile: parallel_weights must be >= 0 with a positive sum")
        prefix = len(ROOT_TOOLS) * self.tool_tokens + self.system_tokens + 4 * self.task_tokens_p50
        if prefix + 4 * self.answer_tokens_p50 >= self.max_context_tokens:
            raise ConfigError(
                f"--max-context: {self.max_context_tokens} tokens does not hold the agent's first request "
                f"(tools, system prompt and task: about {prefix} tokens)"
            )


@dataclass
class _Request:
    request_id: str
    session_id: str
    parent_session_id: str | None
    agent: str
    turn: int
    arrival_s: float
    ttft_s: float
    e2e_s: float
    depends_on: list[str]
    wait_s: float | None
    input_tokens: int
    output_tokens: int
    body: str
    block_hashes: list[int]
    response: str  # the answer's text (its tool calls are in the next step's history)
    tool_calls: list[int]  # the argument tokens of each of its tool calls (empty: text only)

    @property
    def end_s(self) -> float:
        return self.arrival_s + self.e2e_s


class _Maker:
    """Texts and requests of one root session (and its subagents), from one rng."""

    def __init__(self, cfg: AgentConfig, vocab: Any, rng: np.random.Generator, agents: dict[str, _Agent]):
        self.cfg, self.vocab, self.rng, self.agents = cfg, vocab, rng, agents
        self.out: list[_Request] = []

    def length(self, median: int, sigma: float | None = None, hi: int | None = None) -> int:
        n = median * math.exp((sigma or self.cfg.sigma) * self.rng.standard_normal())
        return int(np.clip(round(n), 1, hi or 8 * median))

    def text(self, n: int) -> tuple[str, np.ndarray]:
        units = self.vocab.sample(n, self.rng)
        return self.vocab.render(units), units

    def session(
        self,
        session_id: str,
        parent: str | None,
        agent: str,
        start_s: float,
        first: tuple[str, np.ndarray],
        depends_on: list[str],
        wait_s: float | None,
        steps: int,
    ) -> tuple[_Request, tuple[str, np.ndarray]]:
        """Emit a session's requests; return its last request and its final answer."""
        cfg = self.cfg
        tool_defs, tool_units, system = self.agents[agent]
        messages: list[dict] = [{"role": "system", "content": system[0]}, {"role": "user", "content": first[0]}]
        history = [tool_units, system[1], first[1]]
        names = [t["function"]["name"] for t in tool_defs]
        plain = [n for n in names if n != "task"]
        ready_s, seen_tokens = start_s, 0
        last: _Request | None = None
        answer = content = first
        for step in range(steps):
            final = step == steps - 1
            content = self.text(self.length(cfg.answer_tokens_p50 if final else cfg.content_tokens_p50))
            calls: list[tuple[str, tuple[str, np.ndarray]]] = []
            if not final:
                spawn = agent == "coder" and "task" in names and self.rng.random() < cfg.subagent_p
                if spawn:
                    k = int(self.rng.integers(1, cfg.subagents_max + 1))
                    calls = [("task", self.text(self.length(cfg.task_tokens_p50))) for _ in range(k)]
                else:
                    w = np.asarray(cfg.parallel_weights, dtype=np.float64)
                    k = int(self.rng.choice(len(w), p=w / w.sum())) + 1
                    picks = self.rng.choice(len(plain), size=k)
                    calls = [(plain[int(p)], self.text(self.length(cfg.argument_tokens_p50))) for p in picks]
            input_tokens = int(sum(len(u) for u in history))
            # the texts (what later steps' histories hold) and, as an engine counts its output,
            # each call's markup besides
            text_tokens = len(content[1]) + sum(len(a[1]) for _, a in calls)
            output_tokens = text_tokens + TOOL_CALL_OVERHEAD_TOKENS * len(calls)
            if input_tokens + output_tokens > cfg.max_context_tokens:
                if last is None:
                    raise ConfigError(
                        f"--max-context: {cfg.max_context_tokens} tokens does not hold {session_id}'s first request"
                    )
                break
            new = input_tokens - seen_tokens
            ttft = cfg.request_overhead_s + new / cfg.prefill_tokens_per_s
            e2e = ttft + output_tokens * cfg.decode_s_per_token
            rid = f"{session_id}/step-{step:03d}"
            body = {"model": cfg.model, "messages": list(messages), "tools": tool_defs, "max_tokens": output_tokens}
            ids = self.vocab.ids(np.concatenate(history))
            req = _Request(
                request_id=rid,
                session_id=session_id,
                parent_session_id=parent,
                agent=agent,
                turn=step,
                arrival_s=ready_s,
                ttft_s=ttft,
                e2e_s=e2e,
                depends_on=depends_on,
                wait_s=wait_s,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                body=body_json(body),
                block_hashes=block_hashes(ids, cfg.block_size),
                response=content[0],
                tool_calls=[len(a[1]) for _, a in calls],
            )
            self.out.append(req)
            last, seen_tokens, answer = req, input_tokens + text_tokens, content
            if final:
                break
            call_ids = [f"call-{session_id.replace('/', '-')}-{step}-{j}" for j in range(len(calls))]
            messages.append(
                {
                    "role": "assistant",
                    "content": content[0],
                    "tool_calls": [
                        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps({"input": arg[0]})}}
                        for cid, (name, arg) in zip(call_ids, calls)
                    ],
                }
            )
            history += [content[1], *(a[1] for _, a in calls)]
            if calls[0][0] == "task":
                subs = []
                for j, (_, arg) in enumerate(calls):
                    steps_sub = min(_MAX_STEPS, int(self.rng.geometric(1.0 / cfg.subagent_steps_mean)) + 1)
                    go = self.rng.lognormal(math.log(0.1), 0.5)
                    subs.append(
                        self.session(
                            f"{session_id}/sub-{step:03d}-{j}",
                            session_id,
                            "explorer",
                            req.end_s + go,
                            arg,
                            [rid],
                            go,
                            steps_sub,
                        )
                    )
                results = [a for _, a in subs]
                wait_s = float(self.rng.lognormal(math.log(0.1), 0.5))
                ready_s = max([req.end_s] + [s.end_s for s, _ in subs]) + wait_s
                depends_on = [rid] + [s.request_id for s, _ in subs]
            else:
                results = [self.text(self.length(cfg.result_tokens_p50, cfg.result_sigma, cfg.max_result_tokens)) for _ in calls]
                times = self.rng.lognormal(math.log(cfg.tool_time_p50_s), cfg.tool_time_sigma, len(calls))
                wait_s = float(times.max())
                ready_s = req.end_s + wait_s
                depends_on = [rid]
            for cid, result in zip(call_ids, results):
                messages.append({"role": "tool", "tool_call_id": cid, "content": result[0]})
            history += [r[1] for r in results]
        assert last is not None
        return last, answer


# an agent's tool definitions, their descriptions' units laid end to end, and its system prompt
_Agent = tuple[list, np.ndarray, tuple[str, np.ndarray]]


def _agent(names: tuple[str, ...], tokens: int, system_tokens: int, vocab: Any, rng: np.random.Generator) -> _Agent:
    """An agent's tools (a description of ``tokens`` units each, one string parameter) and its
    system prompt of ``system_tokens`` units: the same in every session of that agent."""
    defs, units = [], []
    for name in names:
        u = vocab.sample(tokens, rng)
        units.append(u)
        defs.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": vocab.render(u),
                    "parameters": {
                        "type": "object",
                        "properties": {"input": {"type": "string"}},
                        "required": ["input"],
                    },
                },
            }
        )
    system = vocab.sample(system_tokens, rng)
    return defs, np.concatenate(units), (vocab.render(system), system)


def generate_agentic(config: AgentConfig | None = None) -> Trace:
    """Make a trace of coding-agent sessions as described in this module's docstring."""
    from replay.prompts import prompt_vocab

    cfg = config or AgentConfig()
    vocab = prompt_vocab(cfg.tokenizer)
    base = np.random.default_rng(np.random.SeedSequence([cfg.seed, _AGENT_DOMAIN]))
    agents = {
        "coder": _agent(ROOT_TOOLS, cfg.tool_tokens, cfg.system_tokens, vocab, base),
        "explorer": _agent(SUBAGENT_TOOLS, cfg.tool_tokens, cfg.subagent_system_tokens, vocab, base),
    }
    starts = np.cumsum(base.exponential(1.0 / cfg.session_rate, cfg.sessions))
    starts -= starts[0]
    requests: list[_Request] = []
    for s, start in enumerate(starts.tolist()):
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, _AGENT_DOMAIN, s]))
        maker = _Maker(cfg, vocab, rng, agents)
        steps = min(_MAX_STEPS, int(rng.geometric(1.0 / cfg.steps_mean)) + 1)
        task = maker.text(maker.length(cfg.task_tokens_p50))
        maker.session(f"agent-{s:04d}", None, "coder", start, task, [], None, steps)
        requests += maker.out
    requests.sort(key=lambda r: (r.arrival_s, r.request_id))
    us = lambda x: int(round(x * 1e6))  # noqa: E731
    df = pl.DataFrame(
        {
            "request_id": [r.request_id for r in requests],
            "session_id": [r.session_id for r in requests],
            "parent_request_id": pl.Series(
                [r.depends_on[0] if r.depends_on and r.turn > 0 else None for r in requests], dtype=pl.String
            ),
            "turn": [r.turn for r in requests],
            "api": ["chat"] * len(requests),
            "model": [cfg.model] * len(requests),
            "arrival_us": [us(r.arrival_s) for r in requests],
            "body": [r.body for r in requests],
            "input_tokens": [r.input_tokens for r in requests],
            "output_tokens": [r.output_tokens for r in requests],
            "max_tokens": [r.output_tokens for r in requests],
            "block_hashes": pl.Series([r.block_hashes for r in requests], dtype=pl.List(pl.UInt64)),
            "ttft_us": [us(r.ttft_s) for r in requests],
            "e2e_us": [us(r.e2e_s) for r in requests],
            "depends_on": pl.Series([r.depends_on for r in requests], dtype=pl.List(pl.String)),
            "wait_us": pl.Series([None if r.wait_s is None else us(r.wait_s) for r in requests], dtype=pl.Int64),
            "parent_session_id": pl.Series([r.parent_session_id for r in requests], dtype=pl.String),
            "agent": [r.agent for r in requests],
            "response": [r.response for r in requests],
            "tool_calls": pl.Series([r.tool_calls for r in requests], dtype=pl.List(pl.Int32)),
        }
    )
    meta = generated_meta(cfg.tokenizer, cfg.block_size)
    return Trace(validate(df, meta, source="generated agent trace"), meta)


def answer_messages(trace: Trace) -> dict[str, dict]:
    """Each request's answer as the agent received it: the assistant message (text and tool
    calls) that its session's next step carries, or for a session's last step its text
    (``response``). For writing the traffic out as a request log with its answers."""
    df = trace.df.select("request_id", "session_id", "turn", "body", "response").sort("session_id", "turn")
    out: dict[str, dict] = {}
    rows = df.iter_rows(named=True)
    prev = None
    for row in rows:
        if prev is not None and prev["session_id"] == row["session_id"]:
            n = len(json.loads(prev["body"])["messages"])
            out[prev["request_id"]] = json.loads(row["body"])["messages"][n]
        elif prev is not None:
            out[prev["request_id"]] = {"role": "assistant", "content": prev["response"]}
        prev = row
    if prev is not None:
        out[prev["request_id"]] = {"role": "assistant", "content": prev["response"]}
    return out
