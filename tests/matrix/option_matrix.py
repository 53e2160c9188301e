#!/usr/bin/env python3
"""The option matrix (issue #27): every flag that changes how `ddpx train` runs, crossed pairwise.

One table below (FACTORS, RULES, tolerances) drives everything:
  cells   the covering array: valid cells in which every compatible pair of values appears at
          least once, and one cell for each refused pair (a valid cell with that pair put in)
  docs    writes the compatibility table into docs/cli.md between its markers (--check: fails
          where the file is not what the table writes)
  run     trains each cell a few steps with real processes and checks its declared outcome:
          a valid cell's loss_train equals a one-process run on the same global batch within
          the cell's tolerance; a refused cell exits non-zero with one line naming both flags

Usage: option_matrix.py cells | docs [--check] | run --ddpx BIN [--only N] [--keep DIR]
"""
import argparse
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time

# The flags and the values crossed. `world` is the number of processes (`ddpx run N --`).
FACTORS = [
    ("world", [1, 2, 4]),
    ("model", ["mlp", "resnet20"]),
    ("transport", ["auto", "gloo"]),
    ("comm_hook", ["allreduce", "bf16", "powersgd"]),
    ("accumulation_steps", [1, 2]),
    ("amp", ["off", "bf16"]),
    ("clip_grad_norm", [0, 1]),
    ("ema_decay", [0, 0.9]),
    ("sync_bn", [False, True]),
    ("shard", ["none", "optimizer", "full"]),
    ("pipeline_parallel", [1, 2]),
    ("tensor_parallel", [1, 2]),
    ("deterministic", [False, True]),
]
NAMES = [name for name, _ in FACTORS]


def hook_compresses(c):
    return c["comm_hook"] != "allreduce"


# Refused pairs: (flag a, predicate on a's value, flag b, predicate on b's value, what ddpx
# prints[, also]). A cell that holds the pair is refused with a line holding the text; `also`,
# a list of (flag, predicate), makes it a refused triple: the pair alone trains.
RULES = [
    ("shard", lambda v: v != "none", "comm_hook", lambda v: v != "allreduce",
     "reduce-scatters gradients uncompressed"),
    ("pipeline_parallel", lambda v: v > 1, "sync_bn", lambda v: v,
     "a pipeline normalises each micro-batch"),
    ("pipeline_parallel", lambda v: v > 1, "comm_hook", lambda v: v != "allreduce",
     "a pipeline stage's replicas average"),
    ("tensor_parallel", lambda v: v > 1, "sync_bn", lambda v: v, "--tensor_parallel 2 with --sync_bn"),
    ("tensor_parallel", lambda v: v > 1, "comm_hook", lambda v: v != "allreduce",
     "the replicas average their pieces"),
    ("tensor_parallel", lambda v: v > 1, "model", lambda v: v == "resnet20",
     "resnet20 has no tensor-parallel plan"),
    ("deterministic", lambda v: v, "shard", lambda v: v != "none",
     "and --clip_grad_norm: the norm over the shards", [("clip_grad_norm", lambda v: v > 0)]),
    ("deterministic", lambda v: v, "pipeline_parallel", lambda v: v > 1,
     "--deterministic with --pipeline_parallel"),
    ("deterministic", lambda v: v, "tensor_parallel", lambda v: v > 1,
     "--deterministic with --tensor_parallel"),
    ("deterministic", lambda v: v, "comm_hook", lambda v: v != "allreduce",
     "--deterministic with --comm_hook"),
    ("deterministic", lambda v: v, "sync_bn", lambda v: v, "--deterministic with --sync_bn"),
    ("deterministic", lambda v: v, "accumulation_steps", lambda v: v > 1,
     "--deterministic with --accumulation_steps"),
    ("sync_bn", lambda v: v, "model", lambda v: v == "mlp", "has no BatchNorm layers"),
    ("world", lambda v: v == 1, "pipeline_parallel", lambda v: v > 1,
     "does not divide the world of 1 ranks"),
    ("world", lambda v: v == 1, "tensor_parallel", lambda v: v > 1,
     "not a whole number of tensor-parallel groups"),
    ("world", lambda v: v == 2, "pipeline_parallel", lambda v: v > 1,
     "is not a whole number of 4-rank replicas", [("tensor_parallel", lambda v: v > 1)]),
]

# Refused once the job has joined, by the plan, before its first collective (the others are
# refused by train/options.cpp before joining).
AFTER_JOINING = [r for r in RULES if r[4] in (
    "resnet20 has no tensor-parallel plan", "has no BatchNorm layers",
    "does not divide the world of 1 ranks", "not a whole number of tensor-parallel groups",
    "is not a whole number of 4-rank replicas")]

BATCH = 32  # the global batch (--batch_size_scaled: split over the data-parallel ranks)
STEPS = 3


def also(rule):
    return rule[5] if len(rule) > 5 else []


def refusals(c):
    def holds(r):
        conditions = [(r[0], r[1]), (r[2], r[3])] + also(r)
        return all(name in c and pred(c[name]) for name, pred in conditions)
    return [r for r in RULES if holds(r)]


def tolerance(c):
    """How far a valid cell's loss_train may be from the one-process reference, and why."""
    tol, why = 5e-4, "fp32: the same sums in another order"
    bn = c["model"] == "resnet20"
    if bn:  # a BatchNorm net at its first steps amplifies rounding (at lr 0.05, 0.005 in 3 steps)
        tol, why = 1e-3, "fp32 through BatchNorm: the same sums in another order"
    if c["deterministic"]:
        return 1e-4, "bitwise the same weights; the printed loss to its last digit"
    if bn and (c["world"] // (c["pipeline_parallel"] * c["tensor_parallel"]) > 1
               or c["accumulation_steps"] > 1 or c["pipeline_parallel"] > 1) and not (
                   c["sync_bn"] and c["accumulation_steps"] == 1):
        tol, why = 0.1, "BatchNorm over a rank's or micro-batch's share, not the global batch"
    if c["amp"] == "bf16" or c["comm_hook"] == "bf16":
        tol, why = max(tol, 0.03), why if tol > 0.03 else "bf16 rounding"
    if c["comm_hook"] == "powersgd" and c["world"] > 1:
        tol, why = max(tol, 0.15), "PowerSGD's rank-2 approximation from step 2"
    return tol, why


def covering_cells(seed=1):
    """Valid cells covering every compatible pair of values, greedily (AETG's way)."""
    rng = random.Random(seed)
    uncovered = set()
    for (i, (a, av)), (j, (b, bv)) in itertools.combinations(enumerate(FACTORS), 2):
        for x in av:
            for y in bv:
                if not refusals({a: x, b: y}):
                    uncovered.add((i, x, j, y))
    cells = []
    while uncovered:
        best, best_gain = None, -1
        for _ in range(400):
            c = {name: rng.choice(values) for name, values in FACTORS}
            # Start from an uncovered pair, so that each cell gains at least one.
            i, x, j, y = rng.choice(sorted(uncovered, key=str))
            c[NAMES[i]], c[NAMES[j]] = x, y
            if refusals(c):
                continue
            gain = sum(1 for (p, u, q, v) in uncovered
                       if c[NAMES[p]] == u and c[NAMES[q]] == v)
            if gain > best_gain:
                best, best_gain = c, gain
        if best is None:
            raise SystemExit("option_matrix: no valid cell covers what is left: %s"
                             % sorted(uncovered, key=str)[:5])
        cells.append(best)
        uncovered = {(p, u, q, v) for (p, u, q, v) in uncovered
                     if not (best[NAMES[p]] == u and best[NAMES[q]] == v)}
    return cells


BASE = {"world": 2, "model": "mlp", "transport": "auto", "comm_hook": "allreduce",
        "accumulation_steps": 1, "amp": "off", "clip_grad_norm": 0, "ema_decay": 0,
        "sync_bn": False, "shard": "none", "pipeline_parallel": 1, "tensor_parallel": 1,
        "deterministic": False}


def refused_cells():
    """One cell a refused pair: the base cell with the pair's first refused values."""
    out = []
    for rule in RULES:
        c = dict(BASE)
        for name, pred in [(rule[0], rule[1]), (rule[2], rule[3])] + also(rule):
            c[name] = next(v for v in dict(FACTORS)[name] if pred(v))
        a = rule[0]
        if a != "world" and (c["pipeline_parallel"] > 1 or c["tensor_parallel"] > 1):
            c["world"] = 2
        # Refused before joining (train/options.cpp) comes first: a plan's own refusal (the
        # MLP's lack of BatchNorm, say) may be in the cell too, behind it.
        first = [r for r in refusals(c) if r not in AFTER_JOINING] or refusals(c)
        assert first == [rule], (rule[4], [r[4] for r in refusals(c)])
        out.append((c, rule))
    return out


def flags(c):
    f = ["--model", c["model"], "--transport", c["transport"]]
    if c["comm_hook"] != "allreduce":
        f += ["--comm_hook", c["comm_hook"]]
        if c["comm_hook"] == "powersgd":
            f += ["--powersgd_rank", "2", "--powersgd_start_iter", "2"]
    for name in ("accumulation_steps", "clip_grad_norm", "ema_decay", "pipeline_parallel",
                 "tensor_parallel"):
        if c[name] != BASE[name]:
            f += ["--" + name, str(c[name])]
    if c["amp"] != "off":
        f += ["--amp", c["amp"]]
    if c["sync_bn"]:
        f.append("--sync_bn")
    if c["shard"] != "none":
        f += ["--shard", c["shard"]]
    if c["deterministic"]:
        f += ["--deterministic", "--deterministic_atom", "4"]
    return f


def common(batch, accumulate=1):
    # No random flips: their streams are a rank's, so they differ with the world size (as
    # PyTorch's DataLoader workers' do); --deterministic keys them by the sample instead.
    return ["train", "--num_epochs", "1", "--limit_train_batches", str(STEPS * accumulate),
            "--no_flip",
            "--limit_test_batches", "1", "--eval_batch_size", "64", "--batch_size", str(batch),
            "--optimizer", "sgd", "--learning_rate", "0.01", "--threads", "1",
            "--loader_workers", "1", "--no_progress"]


def command(ddpx, c, log_dir):
    accumulate = c["accumulation_steps"]
    argv = common(BATCH // accumulate, accumulate) + ["--batch_size_scaled"] + flags(c)
    if c["world"] == 1:
        return [ddpx] + argv
    return [ddpx, "run", str(c["world"]), "--log_dir", log_dir, "--threads_per_worker", "1",
            "--"] + argv


def reference_command(ddpx, c):
    """One process, the whole global batch, the flags that change the arithmetic."""
    r = dict(BASE, world=1, model=c["model"], amp=c["amp"], clip_grad_norm=c["clip_grad_norm"],
             deterministic=c["deterministic"])
    return [ddpx] + common(BATCH) + flags(r)


LOSS = re.compile(r"loss_train - ([0-9.]+)")


def run(argv, timeout=240):
    start = time.time()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, time.time() - start


def describe(c):
    return " ".join(f"{k}={c[k]}" for k in NAMES if c[k] != BASE[k] or k == "world")


def run_matrix(ddpx, only, keep):
    tmp = keep or tempfile.mkdtemp(prefix="ddpx-matrix.")
    failures, references = [], {}
    cells = [(c, None) for c in covering_cells()] + refused_cells()
    if only is not None:
        cells = [cells[only]]
    for n, (c, rule) in enumerate(cells):
        argv = command(ddpx, c, os.path.join(tmp, f"logs{n}"))
        code, out, seconds = run(argv)
        label = f"cell {n} ({describe(c)})"
        if rule is not None:
            lines = [l for l in out.splitlines() if rule[4] in l]
            ok = code != 0 and lines
            print(f"{'ok  ' if ok else 'FAIL'} {label}: refused ({seconds:.1f} s): "
                  f"{lines[0].strip() if lines else out.strip()[-300:]}", flush=True)
            if not ok:
                failures.append(label)
            continue
        got = LOSS.findall(out)
        if code != 0 or not got:
            print(f"FAIL {label}: exit {code}\n  $ {' '.join(argv)}\n{out[-1500:]}", flush=True)
            failures.append(label)
            continue
        ref_argv = reference_command(ddpx, c)
        key = " ".join(ref_argv)
        if key not in references:
            rcode, rout, _ = run(ref_argv)
            rgot = LOSS.findall(rout)
            references[key] = float(rgot[-1]) if rcode == 0 and rgot else None
            if references[key] is None:
                print(f"FAIL reference for {label}: exit {rcode}\n{rout[-1500:]}", flush=True)
        want = references[key]
        tol, why = tolerance(c)
        ok = want is not None and abs(float(got[-1]) - want) <= tol + 1e-9
        print(f"{'ok  ' if ok else 'FAIL'} {label}: loss_train {got[-1]} against one process's "
              f"{want} (within {tol}: {why}; {seconds:.1f} s)", flush=True)
        if not ok:
            print(f"  $ {' '.join(argv)}", flush=True)
            failures.append(label)
    valid = sum(1 for _, r in cells if r is None)
    print(f"option matrix: {len(cells)} cells ({valid} that train, {len(cells) - valid} refused), "
          f"{len(failures)} failed")
    return 1 if failures else 0


BEGIN, END = "<!-- option-matrix:begin -->", "<!-- option-matrix:end -->"


def docs_table():
    def values(name, pred):
        vs = [v for v in dict(FACTORS)[name] if pred(v)]
        def show(v):
            if name == "world":
                return f"`ddpx run {v}`" if v > 1 else "one process"
            if isinstance(v, bool):
                return f"`--{name}`"
            return f"`--{name} {v}`"
        return " or ".join(show(v) for v in vs)
    rows = ["| with | refused: | ddpx says (one line, exit 2, or before the first collective) |",
            "|---|---|---|"]
    for rule in RULES:
        a, pa, b, pb, text = rule[:5]
        with_also = "".join(f" (with {values(n, p)})" for n, p in also(rule))
        rows.append(f"| {values(a, pa)} | {values(b, pb)}{with_also} | \"...{text}...\" |")
    def level(v):
        return {False: "off", True: "on"}.get(v, v) if isinstance(v, bool) else v
    factors = ", ".join(f"`{n}` ({' / '.join(str(level(v)) for v in vs)})" for n, vs in FACTORS)
    cells = covering_cells()
    return "\n".join([
        BEGIN,
        f"Generated by `tests/matrix/option_matrix.py docs` from the table that the `matrix` "
        f"tests run. The flags crossed: {factors}. Every pair of values not below trains: the "
        f"matrix's {len(cells)} valid cells hold each such pair at least once, and each "
        f"cell's loss_train over {STEPS} steps matches one process on the same global batch of "
        f"{BATCH} (fp32 within 5e-4, 1e-3 through BatchNorm, bf16 within 0.03, PowerSGD within 0.15, a BatchNorm model's "
        f"per-rank statistics within 0.1, `--deterministic` to the printed digit). The pairs "
        f"below are refused, each by one cell that holds it alone:",
        "",
        *rows,
        END,
    ])


def write_docs(check):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "cli.md")
    text = open(path).read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"option_matrix: {path} lacks the markers {BEGIN} ... {END}")
    new = text[:text.index(BEGIN)] + docs_table() + text[text.index(END) + len(END):]
    if check:
        if new != text:
            print(f"option_matrix: {path}'s option table is not what the matrix writes; run "
                  f"tests/matrix/option_matrix.py docs", file=sys.stderr)
            return 1
        print("option_matrix: docs/cli.md's table matches the matrix")
        return 0
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("cells")
    d = sub.add_parser("docs")
    d.add_argument("--check", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--ddpx", required=True)
    r.add_argument("--only", type=int)
    r.add_argument("--keep")
    a = ap.parse_args()
    if a.what == "cells":
        for n, c in enumerate(covering_cells()):
            print(f"cell {n}: {describe(c)}  (tolerance {tolerance(c)[0]})")
        for c, rule in refused_cells():
            print(f"refused: {describe(c)}  -> {rule[4]}")
        return 0
    if a.what == "docs":
        return write_docs(a.check)
    return run_matrix(a.ddpx, a.only, a.keep)


if __name__ == "__main__":
    sys.exit(main())
