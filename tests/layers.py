"""tests/layers.py -- every #include and import points down the layers.

The layers (docs/ARCHITECTURE.md), lowest first:
    core      core/: the problem (attn_params.h), the mask, the merge rule,
              the tolerances, the C ABI of the kernels (fa_gpu.h) and the
              table of versions; includes nothing outside itself
    harness   src/harness/: flags, inputs, .npy files, counters, provenance
    cpu       src/cpu/: the CPU stages' algorithms, the ring plan, the merge,
              the fp64 NumPy reference
    gpuhost   src/gpu/: host code the GPU programs share (they call the
              kernels only through core/fa_gpu.h and core/fa_decode.h)
    programs  src/programs/: one main per program, its command line
    kernels   kernels/: CUDA kernels and their launchers (core only)
    python    python/: the PyTorch op and its binding of the C ABI
    tools     scripts/: what make runs (may use all of the above)
    paper     paper/: the paper and its generators
    examples  examples/: programs a user copies; the package only (python, core)
    tests, exercises: may use anything
A file may use its own layer and those listed as below it in ALLOWED. The
test reads each C/CUDA file's #include "..." (resolved the way the compiler
does: the file's folder, then -Icore, src/'s folders, -Ikernels, then any file of that
name) and each Python file's imports of the repository's own modules; it
fails on one that points the wrong way, and first checks on made-up files
that it would. The layer of a file is its folder, so a stage or a program
added in its folder needs no edit here; a file under src/ outside the
folders above fails, as does a main in a library folder or a program file
without one.

    python3 tests/layers.py      PASS/FAIL lines (tests/run.sh protocol)
"""
import ast
import fnmatch
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import repo_files  # noqa: E402  (tests/repo_files.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (pattern, layer): the first pattern that matches a path names its layer.
LAYER_OF = [
    ("core/*", "core"),
    ("src/harness/*", "harness"),
    ("src/cpu/*", "cpu"),
    ("src/gpu/*", "gpuhost"),
    ("src/programs/*", "programs"),
    ("kernels/*", "kernels"),
    ("python/*", "python"),
    ("scripts/*", "tools"),
    ("paper/*", "paper"),
    ("examples/*", "examples"),
    ("tests/*", "tests"),
    ("exercises/*", "exercises"),
]
BELOW_TOOLS = {"core", "harness", "cpu", "gpuhost", "programs", "kernels", "python", "tools"}
ALLOWED = {
    "core": {"core"},
    "harness": {"core", "harness"},
    "cpu": {"core", "harness", "cpu"},
    "gpuhost": {"core", "harness", "cpu", "gpuhost"},
    "programs": {"core", "harness", "cpu", "gpuhost", "programs"},
    "kernels": {"core", "kernels"},
    "python": {"core", "python"},
    "tools": BELOW_TOOLS,
    # what a user would copy: the package as installed, nothing of the build
    "examples": {"core", "python", "examples"},
    "paper": BELOW_TOOLS | {"paper"},
    "tests": BELOW_TOOLS | {"paper", "tests", "exercises", "examples"},
    "exercises": BELOW_TOOLS | {"paper", "tests", "exercises", "examples"},
}
C_EXT = (".c", ".h", ".cu", ".cuh", ".def")
INCLUDE_DIRS = ("core", "src/harness", "src/cpu", "src/gpu", "kernels")
MAIN = re.compile(r"^int main\(", re.M)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(rel):
    for pat, name in LAYER_OF:
        if fnmatch.fnmatch(rel, pat):
            return name
    return None


def resolve_include(rel, name, files):
    """The repository file that `#include "name"` in rel reads, or None (a
    system header, or one that a build generates)."""
    for d in (os.path.dirname(rel),) + INCLUDE_DIRS:
        cand = os.path.normpath(os.path.join(d, name))
        if cand in files:
            return cand
    base = [f for f in files if os.path.basename(f) == os.path.basename(name)]
    return base[0] if len(base) == 1 else None


def py_modules(files):
    mods = {}
    for f in files:
        if f.endswith(".py"):
            mods.setdefault(os.path.basename(f)[:-3], []).append(f)
    return mods


def resolve_import(rel, text, module, mods):
    """The repository files `import module` in rel may read: one beside it,
    else those in a folder that the file names in a string (its sys.path
    edit), else every file of that name."""
    cands = mods.get(module.split(".")[0], [])
    here = [c for c in cands if os.path.dirname(c) == os.path.dirname(rel)]
    if here:
        return here
    named = [c for c in cands if '"%s"' % os.path.basename(os.path.dirname(c)) in text]
    return named or cands


def imports(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def violations(sources, files):
    """sources: {path: text}. Lines 'a -> b (layer x may not use layer y)'."""
    bad = []
    mods = py_modules(files)
    for rel, text in sorted(sources.items()):
        mine = layer(rel)
        if mine is None:
            continue
        targets = []
        if rel.endswith(C_EXT):
            targets = [resolve_include(rel, n, files) for n in INCLUDE.findall(text)]
        elif rel.endswith(".py"):
            for m in imports(text):
                targets += resolve_import(rel, text, m, mods)
        for t in targets:
            theirs = layer(t) if t else None
            if theirs and theirs not in ALLOWED[mine]:
                bad.append(f"{rel} -> {t} ({mine} may not use {theirs})")
    return bad


def self_check(files):
    """The rule on made-up files: each must be caught, and a good one not."""
    fake = {
        "core/bad.h": '#include "common.h"\n',
        "src/harness/util.c": '#include "fa_api_impl.cuh"\n',
        "kernels/bad.cu": '#include "stage1_naive.h"\n',
        "src/cpu/stage3_tiled.c": '#include "gpu_host.h"\n',
        "src/gpu/gpu_host.c": '#include "stage1_main.c"\n',
        "python/bad.py": "import claims\n",
    }
    extra = ["core/bad.h", "kernels/fa_api_impl.cuh", "paper/claims.py", "python/bad.py",
             "kernels/bad.cu"]
    pool = sorted(set(files) | set(extra) | {"src/harness/common.h", "src/cpu/stage1_naive.h", "src/gpu/gpu_host.h",
                                               "src/programs/stage1_main.c"})
    pool = [p for p in pool if not (p.endswith("claims.py") and not p.startswith("paper/"))]
    caught = violations(fake, pool)
    good = violations({"kernels/ok.cu": '#include "fa_gpu.h"\n', "src/programs/stage4_main.c":
                       '#include "stage3_tiled.h"\n#include "fa_gpu.h"\n'}, pool)
    every = all(any(c.startswith(f + " ->") for c in caught) for f in fake)
    return every and not good, caught, good


def main():
    files = repo_files.listed()
    if files is None:
        print("SKIP layers: not a git checkout (the file list comes from git)")
        return 0
    ok, caught, good = self_check(set(files))
    if ok:
        print(f"PASS layers self-check: {len(set(c.split(' ->')[0] for c in caught))} made-up wrong-way "
              "includes and imports caught, "
              "the right-way ones passed")
    else:
        print(f"FAIL layers self-check: caught {caught}, flagged good {good}")
    sources = repo_files.texts(rel for rel in files if rel.endswith(C_EXT + (".py",)) and layer(rel))
    bad = violations(sources, set(files))
    n_c = sum(1 for r in sources if r.endswith(C_EXT))
    repo_files.report(bad, f"layers: {len(bad)} include(s)/import(s) point up the layers (docs/ARCHITECTURE.md):",
                      f"layers: core <- harness <- CPU stages <- GPU host programs, core <- kernels, "
                      f"core <- python <- scripts <- paper ({n_c} C/CUDA and {len(sources) - n_c} Python files read)")
    core_c = [r for r in sources if r.startswith("core/") and r.endswith(C_EXT)]
    escaped = [f"{r}: {n}" for r in core_c for n in INCLUDE.findall(sources[r])
               if not os.path.isfile(os.path.join(ROOT, "core", n))]
    if escaped:
        print("FAIL core includes only core: " + "; ".join(escaped))
    else:
        print(f"PASS core includes only core: the {len(core_c)} files of core/ include no other repository file")
    fake_rooms = rooms({"src/cpu/x.c": "int main(void)\n", "src/programs/y.c": "int f(void)\n",
                        "src/programs/z.c": "int main(int argc, char **argv)\n"}, ["src/w.c"])
    if len(fake_rooms) != 3:
        print(f"FAIL src/ by folder self-check: {fake_rooms}")
        ok = False
    placed = rooms(sources, files)
    if placed:
        print("FAIL src/ by folder: " + "; ".join(placed))
    else:
        n_src = sum(1 for r in files if r.startswith("src/"))
        print(f"PASS src/ by folder: the {n_src} files of src/ in harness, cpu, gpu or programs; "
              "every main in src/programs/, none outside it")
    return 0 if ok and not bad and not escaped and not placed else 1


def rooms(sources, files):
    """Lines naming a file of src/ outside the layers' folders, a library
    file with a main, or a program file without one."""
    bad = [f"{r} is in no layer's folder" for r in files if r.startswith("src/") and layer(r) is None]
    for r, text in sorted(sources.items()):
        if not (r.startswith("src/") and r.endswith(".c")):
            continue
        has_main = bool(MAIN.search(text))
        if layer(r) == "programs" and not has_main:
            bad.append(f"{r} holds no main (library code belongs in src/cpu, src/gpu or src/harness)")
        elif layer(r) != "programs" and has_main:
            bad.append(f"{r} holds a main (programs belong in src/programs)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
