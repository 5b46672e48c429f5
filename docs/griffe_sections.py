"""Griffe extension of the API reference: four docstring habits of keras_attn.

Loaded by mkdocs.yml (mkdocstrings, python handler, `extensions`); it changes
what the reference shows, never the source.

- `Example:` followed by doctest lines at the section's own indentation (the
  layout `pytest --doctest-modules` reads) is not a Google section for
  griffe, so its `>>>` lines would render as nested Markdown quotes. The
  block is indented under an `Examples:` section, which griffe renders as
  prose and highlighted doctest code.
- `Call arguments:` (the arguments of a layer's `call`, Keras' own docstring
  style) renders as an admonition; its `name: description` items become a
  Markdown list so that they do not run together into one paragraph.
- A reST literal block (a paragraph ending in `::`, then an indented block)
  would render as a paragraph: the `::` becomes `:` and the block a Markdown
  code block.
- `Name.__doc__ = '...'` after `Name = collections.namedtuple(...)`
  (`keras_attn.preprocessing.performance_events.Note`) is a docstring Python
  sees and static analysis does not: it is given to `Name`.
"""

import ast
import re

import griffe

_HEADER = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_LIST_ITEM = re.compile(r"^\s*([*+-]|\d+\.)\s")
_ITEM = re.compile(r"^(\*{0,2}\w+(?:, \*{0,2}\w+)*):\s+(.*)$")


def _indent(line):
    return len(line) - len(line.lstrip())


def _is_header(line):
    return bool(line.strip()) and _indent(line) == 0 and bool(_HEADER.match(line))


def _examples(lines, start):
    """The `Example:` block at `start` as an `Examples:` section, and its end."""
    end = start + 1
    while end < len(lines) and not _is_header(lines[end]):
        end += 1
    body = lines[start + 1 : end]
    first = next((line for line in body if line.strip()), "")
    if _indent(first) > 0:  # already indented as a Google section
        return ["Examples:", *body], end
    return ["Examples:", *(("    " + line) if line.strip() else "" for line in body)], end


def _call_arguments(lines, start):
    """The `Call arguments:` block at `start` with its items as a list, and its end."""
    out = [lines[start]]
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > 0):
        line = lines[end]
        match = _ITEM.match(line[4:]) if _indent(line) == 4 else None
        out.append(f"    - `{match.group(1)}`: {match.group(2)}" if match else line)
        end += 1
    return out, end


def _literal_block(lines, start):
    """The paragraph line ending in `::` at `start` and its block as Markdown, and its end."""
    line = lines[start]
    out = [line[: len(line.rstrip()) - 1]]
    end = start + 1
    while end < len(lines) and not lines[end].strip():
        end += 1
    block_start = end
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
        end += 1
    while end > block_start and not lines[end - 1].strip():
        end -= 1
    block = lines[block_start:end]
    margin = min((_indent(row) for row in block if row.strip()), default=0)
    first = start  # of the paragraph: a code block in a list item needs 8 spaces
    while first > 0 and lines[first - 1].strip():
        first -= 1
    in_list = bool(_LIST_ITEM.match(lines[first]))
    indent = " " * (_indent(lines[first]) + (8 if in_list else 4))
    out.append("")
    out.extend((indent + row[margin:]) if row.strip() else "" for row in block)
    return out, end


def rewrite(text):
    """The docstring `text` with its examples, call arguments and literal blocks rewritten."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        stripped = lines[i].rstrip()
        if stripped in ("Example:", "Examples:"):
            block, i = _examples(lines, i)
        elif stripped == "Call arguments:":
            block, i = _call_arguments(lines, i)
        elif stripped.endswith("::") and stripped.strip() != "::":
            block, i = _literal_block(lines, i)
        else:
            block, i = [lines[i]], i + 1
        out.extend(block)
    return "\n".join(out)


def _assigned_doc(statement):
    """(name, string node) for `name.__doc__ = "..."`, else None."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target, value = statement.targets[0], statement.value
    if not (isinstance(target, ast.Attribute) and target.attr == "__doc__"):
        return None
    if not (isinstance(target.value, ast.Name) and isinstance(value, ast.Constant)):
        return None
    return (target.value.id, value) if isinstance(value.value, str) else None


class KerasAttnSections(griffe.Extension):
    """Rewrites `Example:` and `Call arguments:` blocks; reads `Name.__doc__ = ...`."""

    def on_module_members(self, *, node, mod, **kwargs):
        for statement in getattr(node, "body", ()):
            found = _assigned_doc(statement)
            if found is None or found[0] not in mod.members:
                continue
            member, string = mod.members[found[0]], found[1]
            member.docstring = griffe.Docstring(
                string.value, lineno=string.lineno, endlineno=string.end_lineno, parent=member
            )
            member.docstring.value = rewrite(member.docstring.value)  # after griffe's dedent

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
