"""DuckDB parse trees (json_serialize_sql) read, written and walked without recursion.

DuckDB accepts expressions nested up to `max_expression_depth` (1,000) levels: `1+1+...+1` with
400 terms, or 200 nested CASEs. Their JSON parse trees nest three times deeper than that, past
Python's recursion limit, so the json module's own (recursive) reader and writer raise
RecursionError on them. `loads` and `dumps` use the json module (fast, in C) and fall back to the
iterative reader and writer below only for such trees; `nodes` walks a tree with an explicit
stack. Everything that walks a parse tree in timelake goes through here.
"""

import json
import re
from typing import Any, Iterator, List, Tuple

# One JSON token: a string, a number, a literal, or punctuation. Whitespace between tokens is
# skipped by the pattern's leading \s*.
_TOKEN = re.compile(
    r'\s*(?:("(?:[^"\\]|\\.)*")|(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)|(true|false|null)|([{}\[\],:]))',
    re.DOTALL,
)
_LITERALS = {"true": True, "false": False, "null": None}


def loads(text: str) -> Any:
    """json.loads(text), also for trees nested deeper than Python's recursion limit."""
    try:
        return json.loads(text)
    except RecursionError:
        return _loads_iterative(text)


def dumps(value: Any) -> str:
    """json.dumps(value), also for trees nested deeper than Python's recursion limit."""
    try:
        return json.dumps(value)
    except RecursionError:
        return _dumps_iterative(value)


def nodes(tree: Any) -> Iterator[Any]:
    """Every dict and list of `tree` (itself included), parents before their children."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            yield node
            stack.extend(reversed(node))


def _loads_iterative(text: str) -> Any:
    # Containers under construction, innermost last: [container, pending object key or None].
    stack: List[List[Any]] = []
    root: Any = None
    have_root = False
    pos, end = 0, len(text)

    def fail(why: str) -> ValueError:
        return ValueError(f"malformed parse tree JSON at character {pos}: {why}")

    def place(value: Any) -> None:
        nonlocal root, have_root
        if not stack:
            if have_root:
                raise fail("more than one value")
            root, have_root = value, True
            return
        top = stack[-1]
        if isinstance(top[0], list):
            top[0].append(value)
        else:
            if top[1] is None:
                raise fail("a value where a key was expected")
            top[0][top[1]] = value
            top[1] = None

    expect_key = False
    while True:
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip():
                raise fail("unexpected text")
            break
        pos = match.end()
        string, number, literal, punct = match.groups()
        if string is not None:
            value = json.loads(string)
            if expect_key:
                stack[-1][1] = value
                expect_key = False
                colon = _TOKEN.match(text, pos)
                if colon is None or colon.group(4) != ":":
                    raise fail("':' expected after an object key")
                pos = colon.end()
            else:
                place(value)
        elif number is not None:
            place(json.loads(number))
        elif literal is not None:
            place(_LITERALS[literal])
        elif punct in "{[":
            container: Any = {} if punct == "{" else []
            place(container)
            stack.append([container, None])
            expect_key = punct == "{"
        elif punct in "}]":
            if not stack or isinstance(stack[-1][0], dict) != (punct == "}"):
                raise fail(f"unbalanced '{punct}'")
            stack.pop()
            expect_key = False
        elif punct == ",":
            if not stack:
                raise fail("',' outside a container")
            expect_key = isinstance(stack[-1][0], dict)
        else:
            raise fail(f"unexpected '{punct}'")
    if stack or not have_root:
        raise fail("the text ends inside a value")
    return root


def _dumps_iterative(value: Any) -> str:
    out: List[str] = []
    # Work items: ("value", v) to write v, ("text", s) to write s as it is.
    work: List[Tuple[str, Any]] = [("value", value)]
    while work:
        kind, item = work.pop()
        if kind == "text":
            out.append(item)
        elif isinstance(item, dict):
            out.append("{")
            pending: List[Tuple[str, Any]] = []
            for i, (key, v) in enumerate(item.items()):
                pending.append(("text", (", " if i else "") + json.dumps(str(key)) + ": "))
                pending.append(("value", v))
            pending.append(("text", "}"))
            work.extend(reversed(pending))
        elif isinstance(item, (list, tuple)):
            out.append("[")
            pending = []
            for i, v in enumerate(item):
                if i:
                    pending.append(("text", ", "))
                pending.append(("value", v))
            pending.append(("text", "]"))
            work.extend(reversed(pending))
        else:
            out.append(json.dumps(item))
    return "".join(out)
