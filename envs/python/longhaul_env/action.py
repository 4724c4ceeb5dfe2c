"""The policy's action text, parsed as envs/toolcall.c parses it: a tool
call `[thought] <call>NAME(ARGS)</call>` or an answer `ANSWER <eos>`
(grammar in envs/env.h), with the same bounds, the same order of checks
and the same messages, so that an environment served in Python sees what
a built-in sees and the model reads the same error observation.

The text is hostile: it may be megabytes long and full of markers. Every
pass is one of bytes' own scans (encode, decode, count, find, strip and
one anchored regex without backtracking), so the parse is linear in the
text and runs at C speed; the arguments are bounded (max_arg_bytes)
before any tool sees them."""
import re
from typing import NamedTuple, Optional

from .errors import (EnvError, LH_EENVS_CALL_ANSWER_TOO_LONG, LH_EENVS_CALL_ARGS_TOO_LONG, LH_EENVS_CALL_EMPTY,
                     LH_EENVS_CALL_MALFORMED, LH_EENVS_CALL_NOT_UTF8, LH_EENVS_CALL_TRAILING, LH_EENVS_CALL_UNBALANCED,
                     LH_EENVS_CALL_UNKNOWN_TOOL)

MAX_TOOL_NAME = 32            # envs/env.h's LH_ENV_MAX_TOOL_NAME
DEFAULT_MAX_ARG_BYTES = 4096  # LH_ENV_DEFAULT_MAX_ARG_BYTES
DEFAULT_MAX_ANSWER_BYTES = 4096

CALL_OPEN, CALL_CLOSE, EOS = b"<call>", b"</call>", b"<eos>"
SPACE = b" \t\n\r"  # toolcall.c's is_space: ASCII only, as the C trims
# A tool name from the start of the call's body: one character class each,
# so the match cannot backtrack.
NAME = re.compile(rb"[a-z_][a-z0-9_]*")


class ActionError(EnvError):
    """An action the parser refuses: code is one of LH_EENVS_CALL_*, and
    str(e) the one-line message the model reads after "error: "."""


class Action(NamedTuple):
    """kind "call": tool and args; kind "answer": args is the answer
    (trimmed), tool is None."""
    kind: str
    tool: Optional[str]
    args: str


def _bad_utf8(raw):
    """The offset of the first byte that is not allowed (a NUL, or the start
    of a sequence that is not UTF-8: overlong forms, surrogates and code
    points above U+10FFFF included, as toolcall.c's scan), or -1."""
    nul = raw.find(b"\0")
    try:
        raw.decode("utf-8")
        bad = -1
    except UnicodeDecodeError as e:
        bad = e.start
    if nul >= 0 and (bad < 0 or nul < bad):
        return nul
    return bad


def _encode(text):
    """text as UTF-8 bytes; a str holding lone surrogates keeps them as
    bytes that _bad_utf8 refuses."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    return text.encode("utf-8", "surrogatepass")


def _known(tools, name):
    if tools is None:
        return True
    names = tools.split(",") if isinstance(tools, str) else list(tools)
    return name in names


def _tools_text(tools):
    return tools if isinstance(tools, str) else ",".join(tools)


def _call(body, tools, max_arg_bytes):
    body = body.strip(SPACE)
    m = NAME.match(body)
    if not m:
        raise ActionError(LH_EENVS_CALL_MALFORMED, "malformed call: expected a tool name ([a-z_][a-z0-9_]*) after <call>")
    if m.end() > MAX_TOOL_NAME:
        raise ActionError(LH_EENVS_CALL_MALFORMED, f"malformed call: tool name longer than {MAX_TOOL_NAME} bytes")
    name = m.group().decode("ascii")
    rest = body[m.end():].lstrip(SPACE)  # from the '(' on
    if not rest.startswith(b"("):
        raise ActionError(LH_EENVS_CALL_MALFORMED, f"malformed call: expected '(' after tool name '{name}'")
    if len(rest) < 2 or not rest.endswith(b")"):
        raise ActionError(LH_EENVS_CALL_MALFORMED, "malformed call: expected ')' right before </call>")
    args = rest[1:-1]
    if EOS in args:
        raise ActionError(LH_EENVS_CALL_MALFORMED, "malformed call: <eos> inside a tool call")
    if not _known(tools, name):
        raise ActionError(LH_EENVS_CALL_UNKNOWN_TOOL, f"unknown tool '{name}'; tools: {_tools_text(tools)}")
    if len(args) > max_arg_bytes:
        raise ActionError(LH_EENVS_CALL_ARGS_TOO_LONG,
                          f"arguments of '{name}' are {len(args)} bytes; at most {max_arg_bytes}")
    return Action("call", name, args.decode("utf-8"))


def parse_action(text, tools=None, max_arg_bytes=DEFAULT_MAX_ARG_BYTES, max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES):
    """Parses the action text (a str, or its UTF-8 bytes) as lh_action_parse
    does. tools: the known tool names (a list, or a comma-separated str);
    None accepts any well-formed name. Returns an Action or raises
    ActionError; an environment answers the error with the observation
    f"error: {e}" and the episode goes on."""
    raw = _encode(text)
    bad = _bad_utf8(raw)
    if bad >= 0:
        raise ActionError(LH_EENVS_CALL_NOT_UTF8, f"not UTF-8: byte 0x{raw[bad]:02x} at offset {bad} is not allowed")
    # The three markers cannot overlap one another or themselves (each has
    # its only '<' first, and the byte after it differs), so count() sees
    # what toolcall.c's scan sees.
    opens, closes = raw.count(CALL_OPEN), raw.count(CALL_CLOSE)
    eos = raw.find(EOS)
    if opens or closes:
        if opens == 0:
            raise ActionError(LH_EENVS_CALL_UNBALANCED, "unbalanced markers: </call> without <call>")
        if closes == 0:
            raise ActionError(LH_EENVS_CALL_UNBALANCED, "unbalanced markers: <call> without </call>")
        if opens > 1 or closes > 1:
            raise ActionError(LH_EENVS_CALL_UNBALANCED,
                              f"unbalanced markers: {opens} <call> and {closes} </call>; one call per action")
        open_at, close_at = raw.find(CALL_OPEN), raw.find(CALL_CLOSE)
        if close_at < open_at:
            raise ActionError(LH_EENVS_CALL_UNBALANCED, "unbalanced markers: </call> before <call>")
        if raw[close_at + len(CALL_CLOSE):].strip(SPACE):
            raise ActionError(LH_EENVS_CALL_TRAILING, "text after </call>: end the action there")
        if 0 <= eos < open_at:
            raise ActionError(LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there")
        return _call(raw[open_at + len(CALL_OPEN):close_at], tools, max_arg_bytes)
    if eos < 0:
        raise ActionError(LH_EENVS_CALL_EMPTY, "no action: write <call>tool(args)</call> or ANSWER<eos>")
    if raw[eos + len(EOS):].strip(SPACE):
        raise ActionError(LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there")
    answer = raw[:eos].strip(SPACE)
    if len(answer) > max_answer_bytes:
        raise ActionError(LH_EENVS_CALL_ANSWER_TOO_LONG, f"answer is {len(answer)} bytes; at most {max_answer_bytes}")
    return Action("answer", None, answer.decode("utf-8"))
