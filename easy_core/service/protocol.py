"""The wire format of the endpoint: OpenAI's chat-completions request and response, the
`easy` report beside the answer, and OpenAI-style error objects. The limits here are the
schema's; the server's own caps (`params.serve`) are checked on top of them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BUDGET_USD = 1000.0  # the schema's bound; a server's cap is lower
MAX_SECONDS = 86_400.0


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str = Field(max_length=1_000_000)


class ChatCompletionRequest(BaseModel):
    """OpenAI's request body; sampling fields a plan-act loop has no use for are accepted and
    ignored, so any OpenAI client works unchanged. `max_cost_usd` and `max_seconds` bound this
    request (the openai client sends them with `extra_body`)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    stream: bool = False
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    max_cost_usd: float | None = Field(None, gt=0, le=MAX_BUDGET_USD)
    max_seconds: float | None = Field(None, gt=0, le=MAX_SECONDS)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1, le=1)
    user: str | None = Field(None, max_length=256)


class StepReport(BaseModel):
    id: str
    executor: str
    depends_on: list[str]
    status: str
    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    attempts: int = 1  # more than one: retried, or fallen back to `executor`
    error: str | None = None


class MilestoneReport(BaseModel):
    index: int
    milestone: str
    steps: list[StepReport]
    started_s: float
    finished_s: float


class EasyReport(BaseModel):
    """What the loop did: where every step ran, what it cost, how long it took."""

    policy: str
    pool: str
    task_id: str
    end_reason: str
    end_detail: str = ""
    cost_usd: float
    cost_by_executor: dict[str, float]
    budget_usd: float
    budget_s: float
    makespan_s: float
    server_s: float  # the request's time on the server, front included
    milestones: list[MilestoneReport]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    easy: EasyReport


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "easy"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_body(
    message: str, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return ErrorResponse(
        error=ErrorBody(message=message, type=kind, param=param, code=code)
    ).model_dump()
