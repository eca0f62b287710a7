"""Text broken to a width: the live display's region and the run command's own lines.

Lines are made of phrases parted by two spaces (``reruns 2 (provider 2)``,
``$0.01 of cap $1.00``) and break only between phrases where each fits, else
between words; a word longer than a whole line (a long path) is the only
thing ever cut inside.
"""

from __future__ import annotations

import re
import textwrap

PHRASE = re.compile(r" {2,}")  # the region's phrases are parted by two spaces: lines break only there


def fit(lines: list[str], width: int) -> list[str]:
    """Each line broken to at most ``width`` columns, its continuation
    indented: between phrases (parted by two spaces: ``reruns 2 (provider
    2)``, ``$0.01 of cap $1.00``) where they fit, else between words; a word
    longer than a whole line (a long path) is the only thing ever cut inside."""
    out: list[str] = []
    width = max(20, width)
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip(" ")))
        indent = " " * min(len(lead) + 4, width // 2)
        cur = lead
        for phrase in (p for p in PHRASE.split(line.strip(" ")) if p):
            joined = cur + ("  " if cur.strip() else "") + phrase
            if len(joined) <= width:
                cur = joined
                continue
            if cur.strip():
                out.append(cur)
                cur = indent
            if len(cur) + len(phrase) <= width:
                cur += phrase
                continue
            pieces = textwrap.wrap(
                phrase,
                width=width,
                initial_indent=cur,
                subsequent_indent=indent,
                break_long_words=True,
                break_on_hyphens=False,
                replace_whitespace=True,
            ) or [cur]
            out.extend(pieces[:-1])
            cur = pieces[-1]
        if cur.strip():
            out.append(cur)
    return out
