"""tests/paper_prose.py -- the prose of a chapter, for the paper's text checks
(tests/paper_refs.py, tests/paper_history.py): fenced code, inline code and
HTML comments blanked, line numbers kept, so a check reads only the words a
reader reads as text and reports the lines they stand on."""
import re


def prose(text, drop_captions=False):
    """TEXT with fenced code, inline code and HTML comments blanked (each
    line kept, so line numbers hold); with DROP_CAPTIONS also figure lines
    ("![...") blanked, where provenance belongs."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
            continue
        if drop_captions and line.startswith("!["):
            out.append("")
            continue
        out.append(re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)
