"""The examples in a function stub's docstring, as a test program the `python` tool runs
against the function another step wrote. Examples come as doctests (`>>> call` then the
value) or as prose lines such as `f(1, 2) ==> 3`, `f("a") -> 'b'` or `f(x) should return True`
(HumanEval writes both); a prose line counts only when its arguments and value are literals, and
becomes a doctest of the value's repr. These are the tests a
person handing over the stub can see; a suite's hidden checks stay with its checker, so a
passing run here says nothing the policy could not have known.
"""

from __future__ import annotations

import ast
import doctest
from dataclasses import dataclass

from easy_core.executors.python_tool import FENCE

# Between a call and its value in a prose example; longest first, so `==>` is not read as `==`.
_SAYS = ("should return", "returns", "return", "==>", "=>", "->", "➞", "→", "==", "=")
MAX_REPORT_CHARS = 800

# Runs in the sandbox: `inputs` maps each dependency's step id to its output (the python tool
# defines it). A reply that defines the function replaces the stub (the stub's imports kept);
# a bare body completes the stub, as the code suite's checker assembles it.
_PROGRAM = """\
import doctest
import re

reply = inputs[{candidate!r}]
block = re.search(r"```(?:python|py)?\\s*\\n(.*?)(?:```|$)", reply, re.DOTALL)
code = block.group(1) if block else reply
stub = {stub!r}
if "def {entry}" in code:
    code = stub.split("def ", 1)[0] + "\\n" + code
else:
    code = stub + code
namespace = {{}}
exec(compile(code, "candidate", "exec"), namespace)
test = doctest.DocTestParser().get_doctest({docstring!r}, namespace, {entry!r}, None, 0)
runner = doctest.DocTestRunner(verbose=False, optionflags=doctest.NORMALIZE_WHITESPACE)
report = []
failed, attempted = runner.run(test, out=report.append)
print(f"{{attempted - failed}} of {{attempted}} docstring examples pass")
print("".join(report)[:{limit}])
if failed:
    raise SystemExit(1)
"""


@dataclass(frozen=True)
class ExampleTests:
    entry: str  # the function the stub asks for
    stub: str
    docstring: str  # the examples as doctests
    count: int

    def program(self, candidate_step: str) -> str:
        return _PROGRAM.format(
            candidate=candidate_step,
            stub=self.stub,
            entry=self.entry,
            docstring=self.docstring,
            limit=MAX_REPORT_CHARS,
        )


def example_tests(instruction: str) -> ExampleTests | None:
    """The docstring examples of the last function in the instruction's ```python block (the
    one a stub asks for, after any helpers), or None when there is no stub or no example."""
    block = FENCE.search(instruction)
    if block is None:
        return None
    stub = block.group(1)
    try:
        tree = ast.parse(stub)
    except SyntaxError:
        return None
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not functions:
        return None
    entry = functions[-1].name
    written = ast.get_docstring(functions[-1], clean=True) or ""
    try:
        doctests = [
            (e.source.rstrip("\n"), e.want) for e in doctest.DocTestParser().get_examples(written)
        ]
    except ValueError:  # malformed doctests (doctest's own refusal): the prose ones may do
        doctests = []
    examples = doctests or _prose_examples(written, entry)
    if not examples:
        return None
    docstring = "".join(_as_doctest(source, want) for source, want in examples)
    return ExampleTests(entry, stub, docstring, len(examples))


def _as_doctest(source: str, want: str) -> str:
    """One example as doctest text, its value written as Python prints it: `"21"` becomes
    `'21'`, `None` prints nothing, and a bare `f(x) == y` (no value written) expects True."""
    try:
        value = ast.literal_eval(want.strip()) if want.strip() else None
        if not want.strip() and isinstance(ast.parse(source, mode="eval").body, ast.Compare):
            value = True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass  # printed text, not a value: compared as written
    else:
        want = "" if value is None else f"{value!r}\n"
    first, *more = source.split("\n")
    return f">>> {first}\n" + "".join(f"... {line}\n" for line in more) + want


def _prose_examples(docstring: str, entry: str) -> list[tuple[str, str]]:
    """(call, repr of the value) for each prose line `entry(literals) SAYS literal`."""
    examples = []
    for line in docstring.splitlines():
        start = line.find(f"{entry}(")
        if start < 0 or line.lstrip().startswith((">>>", "def ")):
            continue
        call = _call_at(line[start:])
        if call is None:
            continue
        rest = line[start + len(call) :].strip()
        said = next((s for s in _SAYS if rest.startswith(s)), None)
        if said is None:
            continue
        try:
            value = ast.literal_eval(rest[len(said) :].strip().rstrip(".").strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue  # `f(5) -> 19 - 5 - 6 = 8`: no literal value
        examples.append((call, repr(value)))  # the value's repr, as doctest compares it
    return examples


def _call_at(text: str) -> str | None:
    """The shortest prefix of `text` that is a call with literal arguments only, or None."""
    for end in (i + 1 for i, char in enumerate(text) if char == ")"):
        try:
            node = ast.parse(text[:end], mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(node, ast.Call):
            return None
        try:
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                ast.literal_eval(argument)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None  # `is_happy(a) => False`: `a` is no value
        return text[:end]
    return None
