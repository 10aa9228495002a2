#!/usr/bin/env python3
"""tests/paper_answers.py -- the learner's edition gives no exercise's answer away.

    python3 tests/paper_answers.py LEARNER.html [INSTRUCTOR.html]

LEARNER.html and INSTRUCTOR.html are the two editions' HTML (the same
document as the PDF), read as text with the code left out: a listing's line
numbers and constants (line 310, 65536.f) are not answers. The answers are the numbers of each reference solution,
exercises/solutions/exN/answers.txt, values and the arithmetic in its
comments alike (1 - 310 / 2080 = 0.851 gives 310, 2080 and 0.851 as well as
the answer 0.85), less the numbers the exercise's own statement gives (the
setting: N = 4096, W = 256) and the small ones (integers below 100 and
decimals of fewer than three significant digits, which any page is full
of). Each is looked for as written, with its digits grouped by commas
(536,870,912) and, for a decimal, with the last digit dropped or rounded
(6.07217 for 6.072172) down to four significant digits, as a text would
quote it. A number found in the learner's text fails the test, with where it
stands; the instructor's edition must hold every reference answer (it
prints the solutions), which keeps the search itself honest.

An answer too small to look for alone (exercise 1's speed-up of 2.0, its
tiles of 64 by 512: such numbers are on every page) is looked for where a
text would state it (IN_CONTEXT): the tiles as a shape, Br x Bc, and the
speed-up as a ratio beside the word "forward" or in words beside "naive"
("half of the naive"): in a memory-bound pass the speed-up is the naive over
the tiled forward traffic, which a table of block rules, the claims table or
the text states for tiles with Br = d. The patterns take the values from the
reference answers, never typed here; the test first checks that each finds
its answer as a sentence would write it, and that the same pattern made from
other numbers does not.

A written answer is not a number. Where the model answer is a short
derivation that a chapter could state in passing (exercise 5's proof that
the rebuilt rows of exp(S - L) sum to one: the row sum written as
e^{-L_i} sum_j e^{S_ij}), PROOFS holds the step that gives it away, as TeX
(the HTML keeps each formula's TeX beside its MathML) or as plain text; the
learner's edition may state the fact and send the reader to the exercise,
not take the step. The instructor's edition must take it, and each pattern
is first checked to find its sample and to miss the fact stated alone.

Prints PASS/FAIL lines (tests/run.sh protocol).
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM = re.compile(r"(?<![\w.])\d[\d_]*(?:\.\d+)?")


def sig_digits(tok):
    return len(tok.replace(".", "").lstrip("0"))


def numbers(text):
    out = set()
    for mo in NUM.finditer(text):
        tok = mo.group(0).replace("_", "")
        out.add(tok)
    return out


def small(tok):
    if float(tok) == int(float(tok)) and float(tok) < 100:
        return True                     # 2.000, 1.000: a ratio of one or two
    if "." in tok:
        return sig_digits(tok) < 3
    return int(tok) < 100


# Answers that are also common numbers of the paper for other reasons, with
# the reason; found in the learner's text they are not counted.
COMMON = {
    "512": "exercise 1's Bc, and also N = 512, a block size and 512 MiB all over the paper",
    "255": "W - 1 in exercise 4's arithmetic, not an answer",
    "14.3": "exercise 1's compute time in microseconds, in a comment; the paper's 14.3 is "
            "gigabytes of L2 traffic measured by Nsight Compute",
}


# Answers too small to look for alone, each with where a text states it:
# (exercise, the answers.txt keys, the pattern with {key} standing for the
# key's value in any of its forms, a sentence that states the answers with
# {key} for each value, what a match means).
TIMES = r"\s*(?:×|x|by|\\times)(?:\s*\\times)?\s*"   # 64 × 512; MathML's text adds \times
IN_CONTEXT = [
    (1, ("Br", "Bc"), "{Br}" + TIMES + "{Bc}", "forward tiles of {Br} \u00d7 {Bc}",
     "its forward tiles, Br x Bc"),
    (1, ("speedup_today",), r"\bforward\b[^;]{{0,60}}?{speedup_today}",
     "forward 64 \u00d7 64 1.26 {speedup_today}", "its speed-up, as the naive over the tiled forward traffic"),
    (1, ("speedup_today",), r"{speedup_today_words}[^.;]{{0,25}}\bnaive\b|\bnaive\b[^.;]{{0,25}}{speedup_today_words}",
     "the forward traffic, about 2N^2 elements, half of the naive 4N^2",
     "its speed-up in words, the tiled forward traffic as a fraction of the naive one"),
]


# Written answers short enough to be given away in passing: (exercise, the
# pattern of the step that gives it, a text that takes the step, a text that
# only states the fact, what a match means).
SUM = r"(?:\\sum|\bsum)_\{?j\b[^=]{0,30}?"
PROOFS = [
    (5, SUM + r"(?:\\exp|\bexp)\s*\(\s*S_\{?ij\}?\s*-\s*L_i\s*\)\s*=\s*"
        r"(?:e\^\{?-\s*L_i|\\frac|(?:\\sum|\bsum)_|e\^\{?-)",
     "\\sum_j \\exp(S_{ij} - L_i) = e^{-L_i} \\sum_j e^{S_{ij}} = 1",
     "each row of these P_ij sums to 1; the sum of exp(S_ij - L_i) over the keys it sees",
     "its proof that the rebuilt rows of exp(S - L) sum to one"),
]


def proofs_self_check():
    """None when every PROOFS pattern finds its sample, the model answer's own
    form included, and misses the fact stated alone; else what went wrong."""
    for n, pattern, yes, no, what in PROOFS:
        model = os.path.join(ROOT, f"exercises/solutions/ex{n}/written.md")
        texts = [yes] + ([open(model).read()] if os.path.exists(model) else [])
        for text in texts:
            if not re.search(pattern, text):
                return f"the pattern for exercise {n}'s {what} misses '{text[:60]}...'"
        if re.search(pattern, no):
            return f"the pattern for exercise {n}'s {what} finds the bare fact '{no}'"
    return None


def forms(tok):
    """The ways a text may write tok."""
    f = {tok}
    if "." not in tok and len(tok) > 3:
        f.add(f"{int(tok):,}")
    if "." in tok:
        whole, frac = tok.split(".")
        x = float(tok)
        for keep in range(len(frac) - 1, 0, -1):
            if sig_digits(f"{whole}.{frac[:keep]}") < 4:
                break
            f.add(f"{x:.{keep}f}")
            f.add(f"{whole}.{frac[:keep]}")
    return f


def answers():
    """{exercise n: {number as written: the answers.txt line it is on}}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "exercises/solutions/ex*/answers.txt"))):
        n = int(re.search(r"ex(\d+)", path).group(1))
        st = os.path.join(ROOT, f"exercises/ex{n}/statement.md")
        given = numbers(open(st).read()) if os.path.exists(st) else set()
        got = {}
        for line in open(path):
            if line.lstrip().startswith("# Exercise"):
                continue
            for tok in numbers(line):
                if not small(tok) and tok not in given and tok not in COMMON:
                    got.setdefault(tok, line.strip())
        out[n] = got
    return out


def answer_values(n):
    """{key: value as written} of exercise n's reference answers."""
    out = {}
    path = os.path.join(ROOT, f"exercises/solutions/ex{n}/answers.txt")
    for line in open(path) if os.path.exists(path) else ():
        mo = re.match(r"\s*(\w+)\s*=\s*([\d_.]+)", line)
        if mo:
            out[mo.group(1)] = mo.group(2).replace("_", "")
    return out


def value_pattern(tok):
    """A regular expression for tok as a text may write it: a decimal to any
    number of its places from one (2.000 as 2.0 or 2.00), an integer as it
    stands."""
    if "." in tok:
        whole, frac = tok.split(".")
        alts = [f"{whole}.{frac[:k]}" for k in range(len(frac), 0, -1)]
        alts = [f"{float(tok):.{k}f}" for k in range(len(frac), 0, -1)] + alts
        body = "|".join(re.escape(a) for a in dict.fromkeys(alts))
        return r"(?<![\d.,])(?:" + body + r")(?![\d]|[.,]\d|e)"
    return r"(?<![\d.,])" + re.escape(tok) + r"(?![\d]|[.,]\d)"


def words_pattern(tok):
    """A regular expression for a ratio tok in words, when it has them (2: half,
    twice; 3: a third, three times); else one that matches nothing."""
    words = {2: ("half", "twice"), 3: ("a third", "three times"), 4: ("a quarter", "four times")}
    x = float(tok)
    if x != int(x) or int(x) not in words:
        return r"(?!)"
    return r"\b(?:" + "|".join(re.escape(w) for w in words[int(x)]) + r")\b"


def patterns(vals, keys):
    """The substitutions of an IN_CONTEXT pattern: each key's value, and its
    words as key_words."""
    sub = {k: value_pattern(vals[k]) for k in keys}
    sub.update({k + "_words": words_pattern(vals[k]) for k in keys})
    return sub


def in_context(text):
    """[(exercise, what, pattern, where)], one for each place an IN_CONTEXT
    pattern is found in text; a pattern whose answers are missing is
    reported once, with where None."""
    found = []
    for n, keys, pattern, sample, what in IN_CONTEXT:
        vals = answer_values(n)
        if any(k not in vals for k in keys):
            found.append((n, what, pattern, None))
            continue
        rx = pattern.format(**patterns(vals, keys))
        for mo in re.finditer(rx, text):
            found.append((n, what, rx, text[max(0, mo.start() - 40):mo.end() + 20].replace("\n", " ")))
    return found


def context_self_check():
    """None when every IN_CONTEXT pattern finds its sentence with the
    reference answers in it (a decimal to one place, as a table prints it)
    and the same pattern made from other numbers misses it; else what went
    wrong."""
    for n, keys, pattern, sample, what in IN_CONTEXT:
        vals = answer_values(n)
        if any(k not in vals for k in keys):
            return f"exercise {n}'s answers.txt has no {', '.join(keys)}"
        right = {k: f"{float(vals[k]):.1f}" if "." in vals[k] else vals[k] for k in keys}
        other = {k: f"{float(vals[k]) + 0.3:.1f}" if "." in vals[k] else str(int(vals[k]) + 3) for k in keys}
        text = sample.format(**right)
        if not re.search(pattern.format(**patterns(vals, keys)), text):
            return f"the pattern for exercise {n}'s {what} misses '{text}'"
        if re.search(pattern.format(**patterns(other, keys)), text):
            return f"the pattern for exercise {n}'s {what}, made from other numbers, finds '{text}'"
    return None


def find(text, tok):
    for form in sorted(forms(tok), key=len, reverse=True):
        mo = re.search(r"(?<![\d.,])" + re.escape(form) + r"(?![\d]|[.,]\d)", text)
        if mo:
            return form, text[max(0, mo.start() - 60):mo.end() + 40].replace("\n", " ")
    return None


def prose(path, code=False):
    """The text of an HTML edition without its images, styles and tags, and
    without its code unless code (the instructor's edition prints each
    reference answers.txt as code)."""
    import html
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"(?s)<(script|style|svg)\b.*?</\1>", " ", text)
    if not code:
        text = re.sub(r"(?s)<(pre|code)\b.*?</\1>", " ", text)
    text = re.sub(r"(?s)<img\b[^>]*>", " ", text)
    text = re.sub(r"(?s)<[^>]+>", "", text)
    return html.unescape(text).replace("\u200b", "")


def main(argv):
    if len(argv) < 2:
        print("usage: paper_answers.py LEARNER.html [INSTRUCTOR.html]", file=sys.stderr)
        return 2
    why = context_self_check() or proofs_self_check()
    if why:
        print(f"FAIL paper: no exercise answers in the learner's edition: {why}")
        return 0
    learner = prose(argv[1])
    ans = answers()
    total = sum(len(v) for v in ans.values())
    hits = []
    for n, toks in sorted(ans.items()):
        for tok, line in sorted(toks.items()):
            f = find(learner, tok)
            if f:
                hits.append(f"exercise {n}'s {f[0]} (answers.txt: '{line}') in '...{f[1].strip()}...'")
    for n, pattern, _, _, what in PROOFS:
        for mo in re.finditer(pattern, learner):
            where = learner[max(0, mo.start() - 40):mo.end() + 20].replace("\n", " ")
            hits.append(f"exercise {n}'s answer, {what}, in '...{where.strip()}...'")
    for n, what, rx, where in in_context(learner):
        hits.append(f"exercise {n}'s answer, {what}, " +
                    (f"in '...{where.strip()}...'" if where else "has no reference answer to look for"))
    if total == 0:
        print("FAIL paper: no exercise answers in the learner's edition: found no reference answers")
    elif hits:
        print(f"FAIL paper: no exercise answers in the learner's edition: {len(hits)} found: "
              + "; ".join(hits[:12]) + (" ..." if len(hits) > 12 else ""))
    else:
        print(f"PASS paper: no exercise answers in the learner's edition ({total} numbers of the "
              f"{len(ans)} reference solutions looked for, {len(IN_CONTEXT)} patterns of the small "
              f"ones in their context and {len(PROOFS)} of a written answer's step: none found)")
    if len(argv) > 2:
        inst = prose(argv[2], code=True)
        missing = [f"exercise {n}'s {tok}" for n, toks in sorted(ans.items()) for tok, line in
                   sorted(toks.items()) if "=" in line and tok in line.split("#")[0] and not find(inst, tok)]
        missing += [f"exercise {n}'s {what}" for n, pattern, _, _, what in PROOFS
                    if not re.search(pattern, inst)]
        print("FAIL paper: the instructor's edition holds the answers: missing " + ", ".join(missing[:6])
              if missing else
              "PASS paper: the instructor's edition holds every reference answer (the search finds what is there)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
