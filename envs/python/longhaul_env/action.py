"""The policy's action text, parsed as envs/toolcall.c parses it: a tool
call `[thought] <call>NAME(ARGS)</call>` or an answer `ANSWER <eos>`
(grammar in envs/env.h), with the same bounds, the same order of checks
and the same messages, so that an environment served in Python sees what
a built-in sees and the model reads the same error observation.

The text is hostile: it may be megabytes long and full of markers. Every
pass is one of bytes' own scans (encode, decode, count, find) or an
anchored match of one character class, which cannot backtrack, so the
parse is linear in the text and runs at C speed; offsets are kept rather
than slices, so a long call is not copied; and the arguments are bounded
(max_arg_bytes) before any tool sees them."""
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
# A run of spaces, and a tool name, matched at a given offset: one
# character class each, so neither match can backtrack.
SPACES = re.compile(rb"[ \t\n\r]*")
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


def _bad_utf8(raw, checked):
    """The offset of the first byte that is not allowed (a NUL, or the start
    of a sequence that is not UTF-8: overlong forms, surrogates and code
    points above U+10FFFF included, as toolcall.c's scan), or -1. checked:
    raw came from a strict encode, so it is UTF-8 already."""
    nul = raw.find(b"\0")
    bad = -1
    if not checked:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = e.start
    if nul >= 0 and (bad < 0 or nul < bad):
        return nul
    return bad


def _encode(text):
    """(text as UTF-8 bytes, whether they are known to be UTF-8): a str
    holding lone surrogates keeps them as bytes that _bad_utf8 refuses."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text), False
    try:
        return text.encode("utf-8"), True
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass"), False


def _known(tools, name):
    if tools is None:
        return True
    names = tools.split(",") if isinstance(tools, str) else list(tools)
    return name in names


def _tools_text(tools):
    return tools if isinstance(tools, str) else ",".join(tools)


def _space_to(raw, at, end):
    """The first offset from at (up to end) that is not toolcall.c's space."""
    return SPACES.match(raw, at, end).end()


def _call(raw, at, end, tools, max_arg_bytes):
    """The call whose body is raw[at:end] (between <call> and </call>).
    Offsets into raw rather than slices of it: a body may be megabytes,
    and only the arguments, once bounded, are copied."""
    at = _space_to(raw, at, end)
    m = NAME.match(raw, at, end)
    if not m:
        raise ActionError(LH_EENVS_CALL_MALFORMED,
                          "malformed call: expected a tool name ([a-z_][a-z0-9_]*) after <call>")
    if m.end() - at > MAX_TOOL_NAME:
        raise ActionError(LH_EENVS_CALL_MALFORMED, f"malformed call: tool name longer than {MAX_TOOL_NAME} bytes")
    name = m.group().decode("ascii")
    paren = _space_to(raw, m.end(), end)
    if paren >= end or raw[paren] != 0x28:  # '('
        raise ActionError(LH_EENVS_CALL_MALFORMED, f"malformed call: expected '(' after tool name '{name}'")
    # The body, its trailing space trimmed, must end with ')' after the '(':
    # the last ')' with nothing but space after it.
    close = raw.rfind(b")", paren + 1, end)
    if close < 0 or _space_to(raw, close + 1, end) != end:
        raise ActionError(LH_EENVS_CALL_MALFORMED, "malformed call: expected ')' right before </call>")
    if raw.find(EOS, paren + 1, close) >= 0:
        raise ActionError(LH_EENVS_CALL_MALFORMED, "malformed call: <eos> inside a tool call")
    if not _known(tools, name):
        raise ActionError(LH_EENVS_CALL_UNKNOWN_TOOL, f"unknown tool '{name}'; tools: {_tools_text(tools)}")
    args_bytes = close - paren - 1
    if args_bytes > max_arg_bytes:
        raise ActionError(LH_EENVS_CALL_ARGS_TOO_LONG,
                          f"arguments of '{name}' are {args_bytes} bytes; at most {max_arg_bytes}")
    return Action("call", name, raw[paren + 1:close].decode("utf-8"))


def parse_action(text, tools=None, max_arg_bytes=DEFAULT_MAX_ARG_BYTES, max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES):
    """Parses the action text (a str, or its UTF-8 bytes) as lh_action_parse
    does. tools: the known tool names (a list, or a comma-separated str);
    None accepts any well-formed name. Returns an Action or raises
    ActionError; an environment answers the error with the observation
    f"error: {e}" and the episode goes on."""
    raw, checked = _encode(text)
    bad = _bad_utf8(raw, checked)
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
        if _space_to(raw, close_at + len(CALL_CLOSE), len(raw)) != len(raw):
            raise ActionError(LH_EENVS_CALL_TRAILING, "text after </call>: end the action there")
        if 0 <= eos < open_at:
            raise ActionError(LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there")
        return _call(raw, open_at + len(CALL_OPEN), close_at, tools, max_arg_bytes)
    if eos < 0:
        raise ActionError(LH_EENVS_CALL_EMPTY, "no action: write <call>tool(args)</call> or ANSWER<eos>")
    if _space_to(raw, eos + len(EOS), len(raw)) != len(raw):
        raise ActionError(LH_EENVS_CALL_TRAILING, "text after <eos>: the answer ended there")
    # One copy, of the text before <eos>: its trailing space is trimmed
    # from the right, which no scan from the left finds in linear time.
    answer = raw[_space_to(raw, 0, eos):eos].rstrip(SPACE)
    if len(answer) > max_answer_bytes:
        raise ActionError(LH_EENVS_CALL_ANSWER_TOO_LONG, f"answer is {len(answer)} bytes; at most {max_answer_bytes}")
    return Action("answer", None, answer.decode("utf-8"))
